"""Storage drivers behind one contract (``base.Driver``) and the URI that picks one."""
