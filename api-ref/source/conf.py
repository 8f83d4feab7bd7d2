# API reference of zaqar-delay, built with os-api-ref: tox -e api-ref
project = "zaqar-delay API Reference"
copyright = "zaqar-delay developers"
extensions = ["os_api_ref", "openstackdocstheme"]
openstackdocs_repo_name = "zaqar-delay/zaqar-delay"
openstackdocs_use_storyboard = False
openstackdocs_auto_name = False
html_theme = "openstackdocs"
html_theme_options = {"sidebar_mode": "toc"}
master_doc = "index"
source_suffix = {".rst": "restructuredtext"}
exclude_patterns = []
pygments_style = "native"
