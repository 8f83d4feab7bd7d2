"""Pre-signed URLs: POST /v2/queues/{q}/share and requests carrying the URL-* headers."""

from __future__ import annotations

import datetime
import hashlib
import hmac
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.api import HEADERS, PROJECT, Api, api_on, assert_error, signed_headers
from zaqar_delay.conf import SignedUrlSettings

SECRET = "s3cret"


@pytest.fixture(params=["embedded", "mongodb"])
def signed_api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(request, request.param, signed_url=SignedUrlSettings(secret_key=SECRET))


def test_share_document_is_zaqars(signed_api: Api) -> None:
    api = signed_api
    expires = (
        datetime.datetime.fromtimestamp(api.clock.now_ms() / 1000, datetime.UTC)
        + datetime.timedelta(hours=2)
    ).strftime("%Y-%m-%dT%H:%M:%S")
    result = api.post(
        "/v2/queues/q/share",
        json={"paths": ["messages", "claims"], "methods": ["POST", "GET"], "expires": expires},
    )
    assert result.status_code == 200, result.text
    share = result.json
    assert share["paths"] == ["/v2/queues/q/claims", "/v2/queues/q/messages"]
    assert share["methods"] == ["GET", "POST"]
    assert (share["project"], share["expires"]) == (PROJECT, expires)
    # Zaqar's algorithm: sorted lists, comma-joined, fields separated by a literal backslash-n.
    body = rf"/v2/queues/q/claims,/v2/queues/q/messages\nGET,POST\n{PROJECT}\n{expires}"
    assert (
        share["signature"] == hmac.new(SECRET.encode(), body.encode(), hashlib.sha256).hexdigest()
    )


def test_defaults_are_get_on_messages_for_a_day(signed_api: Api) -> None:
    share = signed_api.post("/v2/queues/q/share").json
    assert (share["paths"], share["methods"]) == (["/v2/queues/q/messages"], ["GET"])
    expires = datetime.datetime.strptime(share["expires"], "%Y-%m-%dT%H:%M:%S")
    now = datetime.datetime.fromtimestamp(signed_api.clock.now_ms() / 1000, datetime.UTC)
    assert abs((expires - now.replace(tzinfo=None)).total_seconds() - 86400) < 2


@pytest.mark.parametrize(
    ("document", "description"),
    [
        ({"bogus": 1}, "Unknown keys: ['bogus']"),
        ({"paths": ["foo"]}, "Invalid paths: ['foo']"),
        ({"methods": ["BREW"]}, "Invalid methods: ['BREW']"),
        ({"expires": "2000-01-01T00:00:00"}, "`expires` is lower than the current time"),
        ({"expires": "1234"}, "`expires` should be date format, for example "
                              "2016-01-01T00:00:00, not integer value: 1234"),
        ({"expires": "soon"}, "`expires` is not an ISO 8601 date: 'soon'"),
    ],
)  # fmt: skip
def test_bad_share_requests(signed_api: Api, document: Any, description: str) -> None:
    assert_error(
        signed_api.post("/v2/queues/q/share", json=document),
        400,
        "Invalid API request",
        description,
    )


def test_without_a_secret_sharing_is_refused(api: Api) -> None:
    assert_error(
        api.post("/v2/queues/q/share"),
        403,
        "Not authorized",
        "Pre-signed URLs are disabled on this server: [signed_url] secret_key is not set.",
    )


def test_signed_requests_are_scoped_by_method_path_and_time(signed_api: Api) -> None:
    api = signed_api
    api.post_messages("q", {"body": "hello"})
    share = api.post("/v2/queues/q/share", json={"methods": ["GET"]}).json
    signed = signed_headers(share)
    allowed = api.client.simulate_get("/v2/queues/q/messages?echo=true", headers=signed)
    assert allowed.status_code == 200
    assert [m["body"] for m in allowed.json["messages"]] == ["hello"]

    def status(method: str, path: str, **changes: str) -> int:
        headers = {**signed, **changes}
        return int(api.client.simulate_request(method, path, headers=headers).status_code)

    assert status("POST", "/v2/queues/q/messages") == 404  # method not signed
    assert status("GET", "/v2/queues/q/stats") == 404  # path not signed
    assert status("GET", "/v2/queues/other/messages") == 404
    assert status("GET", "/v2/queues/q/messages-x") == 404  # a prefix is not a path
    assert status("GET", "/v2/queues/q/messages", **{"URL-Methods": "GET,POST"}) == 404
    assert status("GET", "/v2/queues/q/messages", **{"X-Project-ID": "another"}) == 404
    assert status("GET", "/v2/queues/q/messages", **{"URL-Signature": "0" * 64}) == 404
    api.clock.advance(86401)
    assert status("GET", "/v2/queues/q/messages") == 404  # expired
    # Requests without URL-Signature are unaffected.
    assert api.get("/v2/queues/q/messages", headers=HEADERS).status_code in (200, 204)
