"""What the property-based fuzz tests share: JSON values of every kind, hostile text, their
settings, the check that an answer is no server error, and what a refused request must
leave as it was."""

from __future__ import annotations

import urllib.parse
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings

json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False),
    st.text(max_size=40),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
hostile_text = st.text(
    alphabet=st.sampled_from(list("aZ09-._~:/?#[]@!$&'()*+,;=% \r\n\t\x00\uff03\u200b\ud800é")),
    max_size=20,
)
# Every query parameter a route reads, with hostile values, encoded as a client may send
# them (a lone surrogate as the invalid UTF-8 it would be).
QUERY_KEYS = [
    "limit",
    "marker",
    "detailed",
    "echo",
    "include_claimed",
    "include_delayed",
    "ids",
    "claim_id",
    "pop",
    "wait",
    "with_count",
    "name",
]
queries = st.dictionaries(
    st.sampled_from(QUERY_KEYS) | hostile_text,
    st.sampled_from(["-1", "0", "1", "5", "21", "1000", "true", "no", "9" * 30]) | hostile_text,
    max_size=3,
).map(lambda query: urllib.parse.urlencode(query, errors="surrogatepass"))

# Each example is a few requests on a real store: more examples cost seconds, not minutes.
FUZZ = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


def assert_no_server_error(answer: Any) -> None:
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert answer.json["title"] and answer.json["description"]


def observed(api: Any, project: str | None, kind: str | None, segment: str | None) -> Any:
    """What a request could change, as an admin of ``project`` (None: the default) reads it
    through ``api`` (``tests.helpers.api.Api``): the pools, the flavors, the project's
    queues, and, when the request names a queue or topic (``kind``, "queues" or "topics",
    and its path ``segment``, quoted), its metadata, messages, subscriptions and schedules.
    Each answer as (status, text)."""
    headers = {"X-Roles": "admin"} | ({} if project is None else {"X-Project-ID": project})
    paths = ["/v2/pools?detailed=true", "/v2/flavors?detailed=true", "/v2/queues?detailed=true"]
    if kind is not None:
        named = f"/v2/{kind}/{segment}"
        paths += [named, f"{named}/stats", f"{named}/subscriptions", f"{named}/schedules"]
    answers = [api.get(path, headers=headers) for path in paths]
    return [(answer.status_code, answer.text) for answer in answers]
