"""The server's oslo middleware pipeline, deployed from a paste file."""

from __future__ import annotations

import json
from typing import Any

import falcon.testing
from keystonemiddleware.fixture import AuthTokenFixture

from tests.helpers.keystone import IMPLIED_ROLES

HEADERS = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", "X-Project-ID": "p1"}


class Deployment:
    """The server's WSGI app on the embedded store, and (keystone) the token fixture."""

    def __init__(self, app: Any, tokens: AuthTokenFixture | None):
        self.app = app
        self.client = falcon.testing.TestClient(app)
        self.tokens = tokens

    def preflight(self, path: str, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
        """An OPTIONS request straight to the WSGI app (oslo's CORS answers a preflight
        without a Content-Type, which falcon's test client refuses): status and headers."""
        answered: list[tuple[str, dict[str, str]]] = []
        environ = falcon.testing.create_environ(path, method="OPTIONS", headers=headers)
        body = self.app(environ, lambda status, head, *_: answered.append((status, dict(head))))
        b"".join(body)
        return answered[0]

    def token(self, *roles: str) -> str:
        assert self.tokens is not None
        granted = list(roles)
        for role in granted:
            granted.extend(r for r in IMPLIED_ROLES.get(role, ()) if r not in granted)
        token_id = "t-" + "-".join(roles)
        self.tokens.add_token_data(
            token_id=token_id, project_id="p1", user_id="u1", role_list=granted
        )
        return token_id

    def get(self, path: str, **kwargs: Any) -> falcon.testing.Result:
        return self.client.simulate_get(path, **kwargs)


def details_of(answer: falcon.testing.Result) -> dict[str, Any]:
    assert answer.status_code == 200, answer.text
    return dict(json.loads(answer.text))
