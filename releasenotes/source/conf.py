# Release notes of zaqar-delay, built with reno: tox -e releasenotes
project = "zaqar-delay Release Notes"
copyright = "zaqar-delay developers"
extensions = ["reno.sphinxext"]
master_doc = "index"
exclude_patterns = []
html_theme = "alabaster"
