"""A Keystone v3 stand-in on a loopback port: version discovery and password authentication,
answering with a catalog whose object-store endpoints the test chooses. The token it issues
is a real tempauth token of the Swift all-in-one, so Swift accepts it."""

from __future__ import annotations

import datetime
import http.server
import json
import threading
from collections.abc import Callable
from typing import Any

from tests.processes import free_port

Endpoint = dict[str, str]


class KeystoneStandIn:
    """Serves ``GET /v3`` and ``POST /v3/auth/tokens`` for the users in ``passwords``; the
    token comes from ``token()`` and the catalog lists ``endpoints`` of type object-store.
    Every authentication request's body is kept in ``requests``."""

    def __init__(
        self,
        passwords: dict[str, str],
        token: Callable[[], str],
        endpoints: list[Endpoint],
    ) -> None:
        self.port = free_port()
        self.passwords = passwords
        self.token = token
        self.endpoints = endpoints
        self.requests: list[dict[str, Any]] = []
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v3"

    def start(self) -> KeystoneStandIn:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        standin = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, document: Any, headers: dict[str, str]) -> None:
                body = json.dumps(document).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self) -> None:
                version = {
                    "id": "v3.14",
                    "status": "stable",
                    "links": [{"rel": "self", "href": standin.url + "/"}],
                    "media-types": [
                        {
                            "base": "application/json",
                            "type": "application/vnd.openstack.identity-v3+json",
                        }
                    ],
                }
                self._answer(200, {"version": version}, {})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                request = json.loads(self.rfile.read(length))
                standin.requests.append(request)
                user = request["auth"]["identity"]["password"]["user"]
                if standin.passwords.get(user["name"]) != user["password"]:
                    self._answer(401, {"error": {"code": 401, "title": "Unauthorized"}}, {})
                    return
                project = request["auth"]["scope"]["project"]
                now = datetime.datetime.now(datetime.UTC)
                token = {
                    "methods": ["password"],
                    "issued_at": now.isoformat(),
                    "expires_at": (now + datetime.timedelta(hours=1)).isoformat(),
                    "user": {"id": user["name"], "name": user["name"], "domain": user["domain"]},
                    "project": {
                        "id": project["name"],
                        "name": project["name"],
                        "domain": project["domain"],
                    },
                    "roles": [{"id": "member", "name": "member"}],
                    "catalog": [
                        {
                            "type": "object-store",
                            "name": "swift",
                            "id": "swift",
                            "endpoints": [
                                {**endpoint, "id": str(i), "region_id": endpoint["region"]}
                                for i, endpoint in enumerate(standin.endpoints)
                            ],
                        }
                    ],
                }
                self._answer(201, {"token": token}, {"X-Subject-Token": standin.token()})

        return Handler
