"""Bulk scheduling in and delivery analytics out, on Spark (``zaqar-delay-pipeline``).

Installed with the ``spark`` extra. The server never imports this package.
"""
