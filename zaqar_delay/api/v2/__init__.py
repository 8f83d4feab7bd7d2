"""Resources of the v2 API, one module per resource family."""
