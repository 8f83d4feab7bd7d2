"""``/dashboard/``: the operator dashboard, a static page served by the API's own server.

The page is three files vendored in the package (no build step, no network fetch). It holds
no data and no session: it calls the public v2 API from the browser with the headers any
client sends (``X-Project-ID`` in noauth mode, ``X-Auth-Token`` in keystone mode), so it sees
and changes exactly what its user may. Serving it therefore needs no authentication, like
``GET /``; everything it shows comes from requests that do.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from importlib import resources
from typing import Any

from zaqar_delay.api.raw_errors import json_error

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

PREFIX = "/dashboard/"
ASSETS = {
    "": ("index.html", "text/html; charset=utf-8"),
    "index.html": ("index.html", "text/html; charset=utf-8"),
    "dashboard.js": ("dashboard.js", "text/javascript; charset=utf-8"),
    "dashboard.css": ("dashboard.css", "text/css; charset=utf-8"),
}
# The page runs only its own script and talks only to this server; it may not be framed.
SECURITY_HEADERS = [
    (
        "Content-Security-Policy",
        "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'",
    ),
    ("X-Content-Type-Options", "nosniff"),
    ("Referrer-Policy", "no-referrer"),
    ("Cache-Control", "no-cache"),
]


def _asset(name: str) -> bytes:
    return (resources.files(__package__) / "static" / name).read_bytes()


def with_dashboard(app: WSGIApp) -> WSGIApp:
    """``app`` with ``/dashboard/`` in front of it; every other path goes to ``app``."""
    bodies = {path: (_asset(name), kind) for path, (name, kind) in ASSETS.items()}

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == PREFIX.rstrip("/"):
            start_response("301 Moved Permanently", [("Location", PREFIX)])
            return [b""]
        if not path.startswith(PREFIX):
            return app(environ, start_response)
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return json_error(
                start_response,
                "405 Method Not Allowed",
                "405 Method Not Allowed",
                "The dashboard's files answer GET and HEAD only.",
                [("Allow", "GET, HEAD")],
            )
        found = bodies.get(path[len(PREFIX) :])
        if found is None:
            return json_error(
                start_response, "404 Not Found", "Not found", "No such dashboard file."
            )
        body, kind = found
        headers = [("Content-Type", kind), ("Content-Length", str(len(body))), *SECURITY_HEADERS]
        start_response("200 OK", headers)
        return [b"" if environ["REQUEST_METHOD"] == "HEAD" else body]

    return dispatch
