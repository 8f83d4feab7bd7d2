# The project's documentation, built with Sphinx: tox -e docs
project = "zaqar-delay"
copyright = "zaqar-delay developers"
extensions = ["openstackdocstheme"]
openstackdocs_repo_name = "zaqar-delay/zaqar-delay"
openstackdocs_use_storyboard = False
openstackdocs_auto_name = False
html_theme = "openstackdocs"
master_doc = "index"
source_suffix = {".rst": "restructuredtext"}
exclude_patterns: list[str] = []
pygments_style = "native"
