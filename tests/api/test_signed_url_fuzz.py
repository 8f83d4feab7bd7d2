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

from tests.helpers.api import Api, api_on
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


@FUZZ
# A signature beyond ASCII: compare_digest refuses such text (once a 500).
@example(share={}, tampered={"URL-Signature": "é"}, method="GET", path="messages")
@given(
    share=shares,
    tampered=st.dictionaries(st.sampled_from(SIGNED), header_values, max_size=2),
    method=st.sampled_from(["GET", "POST", "DELETE"]),
    path=st.sampled_from(["messages", "claims", "subscriptions", "stats", ""]),
)
def test_no_share_or_signed_request_is_a_server_error(
    api: Api, share: Any, tampered: dict[str, str], method: str, path: str
) -> None:
    assert api.put("/v2/queues/q").status_code in (201, 204)
    shared = api.post("/v2/queues/q/share", body=json.dumps(share).encode(), headers=JSON)
    assert_no_server_error(shared)
    signed: dict[str, Any] = {"Client-ID": "3381af92-2b9e-11e3-b191-71861300734c"}
    if shared.status_code == 200:
        document = shared.json
        signed.update(
            {
                "URL-Signature": document["signature"],
                "URL-Expires": document["expires"],
                "URL-Methods": ",".join(document["methods"]),
                "URL-Paths": ",".join(document["paths"]),
                "X-Project-ID": document["project"],
            }
        )
    answer = api.request(
        method, f"/v2/queues/q/{path}".rstrip("/"), headers={**signed, **tampered}, body=b"{}"
    )
    assert_no_server_error(answer)
