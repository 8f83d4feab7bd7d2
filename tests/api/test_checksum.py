"""``[DEFAULT] enable_checksum``: every message object shows Zaqar's ``checksum``, "MD5:" and the
MD5 of the body as Python's ``json.dumps`` writes it; without the option, none does."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.helpers.api import Api, api_on
from zaqar_delay.conf import EncryptionSettings, Limits

# Known answers: md5sum of the json.dumps text, which keeps the body's key order, writes ", "
# and ": " and escapes non-ASCII characters.
BODIES = [
    ({"b": 1, "a": "é", "n": [1.5, None, True]}, "MD5:2f44b2fe0e1639702bc6557465e3b19c"),
    ("text", "MD5:20cd815523e5806aec29a57282b0d49f"),
    (7, "MD5:8f14e45fceea167a5a36dedd4bea2543"),
]


@pytest.fixture(params=["embedded", "encrypted"])
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    """The API with checksums on; on an encrypted queue too, whose bodies are stored sealed."""
    limits = Limits(enable_checksum=True)
    if request.param == "encrypted":
        key = EncryptionSettings(key="key-1")
        for api in api_on(request, "embedded", limits=limits, encryption=key):
            api.put("/v2/queues/q", json={"_enable_encrypt_messages": True})
            yield api
    else:
        yield from api_on(request, "embedded", limits=limits)


def checksums(messages: list[dict[str, object]]) -> list[tuple[object, object]]:
    return [(m["body"], m["checksum"]) for m in messages]


def test_every_read_shows_the_checksum(api: Api) -> None:
    ids = api.post_messages("q", *[{"body": body} for body, _ in BODIES])
    one = api.get(f"/v2/queues/q/messages/{ids[0]}").json
    assert (one["body"], one["checksum"]) == BODIES[0]
    listed = api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"]
    assert checksums(listed) == BODIES
    by_ids = api.get("/v2/queues/q/messages", params={"ids": ",".join(ids)}).json["messages"]
    assert sorted(checksums(by_ids), key=str) == sorted(BODIES, key=str)
    claimed = api.post("/v2/queues/q/claims", params={"limit": 2}, json={"ttl": 60})
    assert checksums(claimed.json["messages"]) == BODIES[:2]
    claim = api.get(claimed.headers["Location"]).json
    assert checksums(claim["messages"]) == BODIES[:2]
    popped = api.delete("/v2/queues/q/messages", params={"pop": 1}).json["messages"]
    assert checksums(popped) == BODIES[2:]


def test_without_the_option_no_message_has_one(request: pytest.FixtureRequest) -> None:
    for api in api_on(request, "embedded"):
        [mid] = api.post_messages("q", {"body": 1})
        assert "checksum" not in api.get(f"/v2/queues/q/messages/{mid}").json
        claimed = api.post("/v2/queues/q/claims", json={"ttl": 60}).json["messages"]
        assert [m["body"] for m in claimed] == [1] and "checksum" not in claimed[0]
