"""The HTTP layer: falcon resources, middleware, parameter parsing, error mapping and views."""
