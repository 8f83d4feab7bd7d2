"""The environment variables the service reads besides its config files."""

from __future__ import annotations

# Overrides [storage] uri.
STORAGE_URI_ENV = "ZAQAR_DELAY_STORAGE_URI"
# prometheus-client's multiprocess directory; it must be set before prometheus_client is
# imported, so it lives here rather than in metrics.py.
PROMETHEUS_MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
