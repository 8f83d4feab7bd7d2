"""A Keystone v3 stand-in on a loopback port: version discovery and password authentication,
answering with a catalog whose object-store endpoints the test chooses (the token it issues
is a real tempauth token of the Swift all-in-one, so Swift accepts it); and trusts: created
and deleted by a trustor's token (``user_tokens``), and trust-scoped password tokens."""

from __future__ import annotations

import datetime
import http.server
import json
import threading
import uuid
from collections.abc import Callable
from typing import Any

from testbed.processes import free_port

Endpoint = dict[str, str]


class KeystoneStandIn:
    """Serves ``GET /v3`` and ``POST /v3/auth/tokens`` for the users in ``passwords``; the
    token comes from ``token()`` and the catalog lists ``endpoints`` of type object-store, and
    the ``services`` a test adds.
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
        # More services of the catalog (Keystone's form: type, name, id, endpoints).
        self.services: list[dict[str, Any]] = []
        self.user_tokens: dict[str, str] = {}  # trustor tokens the test registers -> user id
        self.trusts: dict[str, dict[str, Any]] = {}  # live trusts by id
        self.trust_tokens: dict[str, str] = {}  # trust-scoped tokens issued -> trust id
        # Told of each trust-scoped token as it is issued (token, trust), to make it known to
        # the services it is sent to.
        self.on_trust_token: Callable[[str, dict[str, Any]], None] | None = None
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
                if "/OS-TRUST/trusts/" in self.path:
                    self._show_trust(self.path.rstrip("/").rsplit("/", 1)[-1])
                    return
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
                if self.path.rstrip("/").endswith("/OS-TRUST/trusts"):
                    self._create_trust(request["trust"])
                    return
                standin.requests.append(request)
                user = request["auth"]["identity"]["password"]["user"]
                if standin.passwords.get(user["name"]) != user["password"]:
                    self._answer(401, {"error": {"code": 401, "title": "Unauthorized"}}, {})
                    return
                scope = request["auth"].get("scope") or {}
                if "OS-TRUST:trust" in scope:
                    self._trust_token(user, scope["OS-TRUST:trust"]["id"])
                    return
                project = scope.get("project")
                now = datetime.datetime.now(datetime.UTC)
                token: dict[str, Any] = {
                    "methods": ["password"],
                    "issued_at": now.isoformat(),
                    "expires_at": (now + datetime.timedelta(hours=1)).isoformat(),
                    "user": {
                        "id": user["name"],
                        "name": user["name"],
                        "domain": user.get("domain", {"id": "default"}),
                    },
                }
                if project is not None:
                    token["project"] = {
                        "id": project["name"],
                        "name": project["name"],
                        "domain": project["domain"],
                    }
                    token["roles"] = [{"id": "member", "name": "member"}]
                    token["catalog"] = [
                        {
                            "type": "object-store",
                            "name": "swift",
                            "id": "swift",
                            "endpoints": [
                                {**endpoint, "id": str(i), "region_id": endpoint["region"]}
                                for i, endpoint in enumerate(standin.endpoints)
                            ],
                        },
                        *standin.services,
                    ]
                self._answer(201, {"token": token}, {"X-Subject-Token": standin.token()})

            def _create_trust(self, trust: dict[str, Any]) -> None:
                trustor = standin.user_tokens.get(self.headers.get("X-Auth-Token", ""))
                if trustor is None or trustor != trust.get("trustor_user_id"):
                    self._answer(403, {"error": {"code": 403, "title": "Forbidden"}}, {})
                    return
                created = {**trust, "id": uuid.uuid4().hex}
                standin.trusts[created["id"]] = created
                self._answer(201, {"trust": created}, {})

            def _show_trust(self, trust_id: str) -> None:
                trust = standin.trusts.get(trust_id)
                user = standin.user_tokens.get(self.headers.get("X-Auth-Token", ""))
                if trust is None:
                    self._answer(404, {"error": {"code": 404, "title": "Not Found"}}, {})
                elif user not in (trust["trustor_user_id"], trust["trustee_user_id"]):
                    self._answer(403, {"error": {"code": 403, "title": "Forbidden"}}, {})
                else:
                    self._answer(200, {"trust": trust}, {})

            def _trust_token(self, user: dict[str, Any], trust_id: str) -> None:
                trust = standin.trusts.get(trust_id)
                if trust is None or trust["trustee_user_id"] != user["name"]:
                    self._answer(401, {"error": {"code": 401, "title": "Unauthorized"}}, {})
                    return
                now = datetime.datetime.now(datetime.UTC)
                issued = f"trust-{uuid.uuid4().hex}"
                standin.trust_tokens[issued] = trust_id
                if standin.on_trust_token is not None:
                    standin.on_trust_token(issued, trust)
                token = {
                    "methods": ["password"],
                    "issued_at": now.isoformat(),
                    "expires_at": (now + datetime.timedelta(hours=1)).isoformat(),
                    # Impersonation: the token is the trustor's.
                    "user": {
                        "id": trust["trustor_user_id"],
                        "name": "trustor",
                        "domain": {"id": "default"},
                    },
                    "project": {
                        "id": trust["project_id"],
                        "name": trust["project_id"],
                        "domain": {"id": "default"},
                    },
                    "roles": [{"id": r["name"], "name": r["name"]} for r in trust.get("roles", [])],
                    "OS-TRUST:trust": {
                        "id": trust_id,
                        "impersonation": trust.get("impersonation", False),
                        "trustor_user": {"id": trust["trustor_user_id"]},
                        "trustee_user": {"id": trust["trustee_user_id"]},
                    },
                }
                self._answer(201, {"token": token}, {"X-Subject-Token": issued})

            def do_DELETE(self) -> None:
                trust_id = self.path.rstrip("/").rsplit("/", 1)[-1]
                trust = standin.trusts.get(trust_id)
                if trust is None:
                    self._answer(404, {"error": {"code": 404, "title": "Not Found"}}, {})
                    return
                trustor = standin.user_tokens.get(self.headers.get("X-Auth-Token", ""))
                if trustor != trust["trustor_user_id"]:
                    self._answer(403, {"error": {"code": 403, "title": "Forbidden"}}, {})
                    return
                del standin.trusts[trust_id]
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

        return Handler
