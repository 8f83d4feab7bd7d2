"""Property-based fuzz of pre-signed URLs (``signed_urls.py``), with a secret configured: a
share body's methods, paths and expiry, and the four ``URL-*`` headers of a request that
presents a signature (as issued, tampered with, or made up), are answered with a 2xx or a
4xx with Zaqar's error shape, never a 500."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import hypothesis.strategies as st
import pytest
from hypothesis import example, given

from tests.helpers.api import Api, api_on, signed_headers
from tests.helpers.fuzz import FUZZ, assert_no_server_error, hostile_text, json_values
from zaqar_delay.conf import SignedUrlSettings

JSON = {"Content-Type": "application/json"}
METHODS = ["GET", "HEAD", "OPTIONS", "POST", "PUT", "DELETE", "PATCH", "get", ""]
PATHS = ["messages", "subscriptions", "claims", "x", "", "/v2/queues/q/messages"]
shares = (
    st.fixed_dictionaries(
        {},
        optional={
            "methods": st.lists(st.sampled_from(METHODS) | hostile_text, max_size=3) | json_values,
            "paths": st.lists(st.sampled_from(PATHS) | hostile_text, max_size=3) | json_values,
            "expires": st.sampled_from(
                ["2100-01-01T00:00:00", "2000-01-01T00:00:00", "9999-12-31T23:59:59", "x"]
            )
            | hostile_text
            | json_values,
        },
    )
    | json_values
)
# Header values as HTTP carries them: Latin-1 text.
header_values = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=60)
SIGNED = ["URL-Signature", "URL-Expires", "URL-Methods", "URL-Paths", "X-Project-ID"]


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(request, "embedded", signed_url=SignedUrlSettings(secret_key="k"))


REFUSED = "The pre-signed URL does not allow this request."
BODIES = {"messages": json.dumps({"messages": [{"body": "signed"}]}).encode()}


def _names_other_than_issued(sent: dict[str, str], issued: dict[str, str]) -> bool:
    """Whether ``sent`` names another signature, expiry, project, or set of methods or paths
    than ``issued`` (``signed_headers``; the order of a list, and empty items, do not
    count)."""

    def listed(value: str) -> set[str]:
        return {item for item in value.split(",") if item}

    for name, value in issued.items():
        given = sent.get(name)
        if given is None:
            return True
        if name in ("URL-Methods", "URL-Paths"):
            if listed(given) != listed(value):
                return True
        elif given != value:
            return True
    return False


def _state(api: Api) -> Any:
    """What the signed requests could change: the queue's messages and claims, as the
    project sees them without a signature."""
    stats = api.get("/v2/queues/q/stats")
    assert stats.status_code == 200, stats.text
    return stats.json["messages"]


@FUZZ
# A signature beyond ASCII: compare_digest refuses such text (once a 500).
@example(share={}, tampered={"URL-Signature": "é"}, method="GET", path="messages")
# Another project under the issued signature; methods or paths widened.
@example(share={}, tampered={"X-Project-ID": "other"}, method="GET", path="messages")
@example(share={}, tampered={"URL-Methods": "GET,POST"}, method="POST", path="messages")
@example(
    share={"methods": ["GET"]}, tampered={"URL-Paths": "/v2/queues/q"}, method="DELETE", path=""
)
@given(
    share=shares,
    tampered=st.dictionaries(st.sampled_from(SIGNED), header_values, max_size=2),
    method=st.sampled_from(["GET", "POST", "DELETE"]),
    path=st.sampled_from(["messages", "claims", "subscriptions", "stats", ""]),
)
def test_a_signature_allows_what_it_signs_and_nothing_else(
    api: Api, share: Any, tampered: dict[str, str], method: str, path: str
) -> None:
    """A request carrying ``URL-Signature`` is refused with a 404 (a 405 where the route
    answers no such method), and changes nothing,
    unless its headers name what was issued (signature, expiry, project, methods, paths)
    and the issue signs its method and path; a request as issued to what it signs is never
    refused for its signature. No share or request is answered with a server error."""
    assert api.put("/v2/queues/q").status_code in (201, 204)
    api.post_messages("q", {"body": "kept"})
    shared = api.post("/v2/queues/q/share", body=json.dumps(share).encode(), headers=JSON)
    assert_no_server_error(shared)
    issued = signed_headers(shared.json) if shared.status_code == 200 else {}
    sent = {**issued, **tampered}
    target = f"/v2/queues/q/{path}".rstrip("/")
    signs = bool(issued) and (
        method in shared.json["methods"]
        and any(target == p or target.startswith(p + "/") for p in shared.json["paths"])
    )
    before = _state(api)
    headers = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c", **sent}
    answer = api.request(method, target, headers=headers, body=BODIES.get(path, b"{}"))
    assert_no_server_error(answer)
    if "URL-Signature" not in sent:
        return  # a plain request (noauth here): not the signature's to allow or refuse
    if not issued or not signs or _names_other_than_issued(sent, issued):
        # 405: a method the route does not answer is refused before any signature.
        assert answer.status_code in (404, 405), answer.text
        assert answer.status_code == 405 or answer.json["description"] == REFUSED
        assert api.get("/v2/queues/q").status_code == 200  # a refused DELETE kept it
        assert _state(api) == before
    elif not tampered:
        assert answer.status_code != 404 or answer.json["description"] != REFUSED, answer.text
