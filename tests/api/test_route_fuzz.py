"""Property-based fuzz of every route: any method a route answers, hostile names and ids in
its path, any body and hostile values of the headers Zaqar reads. The answer is never a 500
(nor any 5xx: the stores are up). Pooled, with the admin routes on, so pools and flavors
are fuzzed too; pool URIs name only loopback ports nothing listens on, or no host at all."""

from __future__ import annotations

import json
import re
import urllib.parse
from collections.abc import Iterator

import hypothesis.strategies as st
import pytest
from hypothesis import given

from tests.helpers.api import Api, pooled_api_on
from tests.helpers.fuzz import (
    FUZZ,
    assert_no_server_error,
    hostile_text,
    json_values,
    observed,
    queries,
)
from zaqar_delay.api.routes import ROUTES

# The routes with their parameters, as (template, methods).
TEMPLATES = sorted((route.template, sorted(route.methods())) for route in ROUTES)
PARAMETER = re.compile(r"{(\w+)}")

# Half of the names valid, so that requests reach existing resources as often as refusals.
valid_names = st.sampled_from(["q", "redis", "mongo", "f", "s"])
names = st.one_of(
    valid_names, valid_names, st.sampled_from(["a" * 65, "..", "%", "-"]), hostile_text
)
segments = names.map(lambda name: urllib.parse.quote(name, safe="", errors="surrogatepass"))
pool_uris = (
    st.sampled_from(
        [
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:1?socket_timeout=-1",
            "mongodb://127.0.0.1:1/db",
            "swift://u:p@127.0.0.1:1/v1.0",
            "redis:///tmp/../../etc/passwd",
            "redis://[::1",
            "mongodb://",
            "file:///etc/passwd",
        ]
    )
    | hostile_text
)
RESERVED = [
    "_default_message_ttl",
    "_default_message_delay",
    "_max_messages_post_size",
    "_dead_letter_queue",
    "_max_claim_count",
    "_enable_encrypt_messages",
    "_flavor",
]
bodies = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={
            "uri": pool_uris,
            "weight": json_values,
            "group": json_values,
            "flavor": json_values,
            "pool_list": json_values | st.lists(names, max_size=3),
            "options": json_values,
            "capabilities": json_values,
            "methods": json_values | st.lists(st.sampled_from(["GET", "POST", "PUT"])),
            "paths": json_values | st.lists(st.sampled_from(["messages", "claims", "x"])),
            "expires": json_values | st.sampled_from(["2100-01-01T00:00:00", "x"]),
            "messages": json_values,
            "resource_types": json_values | st.lists(st.sampled_from(["messages", "x"])),
            "ttl": json_values,
            "grace": json_values,
            "body": json_values,
            **{key: json_values for key in RESERVED},
        },
    ),
    # JSON patches of queue metadata.
    st.lists(
        st.fixed_dictionaries(
            {
                "op": st.sampled_from(["add", "replace", "remove", "move"]),
                "path": st.sampled_from([f"/metadata/{key}" for key in [*RESERVED, "k"]]),
            },
            optional={"value": json_values},
        ),
        max_size=3,
    ),
)
header_values = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=255), max_size=40)
headers = st.fixed_dictionaries(
    {},
    optional={
        "Client-ID": header_values,
        "X-Project-ID": header_values,
        "URL-Signature": header_values,
        "URL-Expires": header_values | st.sampled_from(["2100-01-01T00:00:00"]),
        "URL-Methods": header_values | st.sampled_from(["GET,POST"]),
        "URL-Paths": header_values | st.sampled_from(["/v2/queues/q/messages"]),
        "Content-Type": st.sampled_from(
            ["application/json", "application/openstack-messaging-v2.0-json-patch", "text/plain"]
        ),
        "Accept": st.sampled_from(["application/json", "text/html", "*/*", "x"]),
    },
)


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from pooled_api_on(request)


@FUZZ
@given(route=st.sampled_from(TEMPLATES), data=st.data())
def test_no_request_to_any_route_is_a_server_error(
    api: Api, route: tuple[str, list[str]], data: st.DataObject
) -> None:
    """Every answer is a 2xx, 3xx or a 4xx with Zaqar's error shape; a 4xx changes none of
    what :func:`observed` reads."""
    template, methods = route
    method = data.draw(st.sampled_from(methods))
    drawn: dict[str, str] = {}

    def parameter(match: re.Match[str]) -> str:
        drawn[match.group(1)] = data.draw(segments)
        return drawn[match.group(1)]

    path = PARAMETER.sub(parameter, template)
    body = json.dumps(data.draw(bodies)).encode()
    query = data.draw(queries)
    # Half the requests with Zaqar's headers as a client sends them, so that as many reach
    # the resource (and may write) as are refused for a header.
    sent = data.draw(st.just({}) | headers)
    named = {"queue_name": "queues", "topic_name": "topics"}
    key = next((k for k in named if k in drawn), None)
    kind, segment = (None, None) if key is None else (named[key], drawn[key])
    before = observed(api, sent.get("X-Project-ID"), kind, segment)
    answer = api.request(method, path, body=body, headers=sent, query_string=query)
    if method == "HEAD":  # no body, by HTTP
        assert answer.status_code < 500
    else:
        assert_no_server_error(answer)
    if answer.status_code >= 400:
        assert observed(api, sent.get("X-Project-ID"), kind, segment) == before, answer.text
