"""/metrics stays bounded however many queues exist: per-queue series for the first
``[metrics] max_queue_series`` queues a process sees, one "_other" series for the rest."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.api import Api, api_on, assert_error
from zaqar_delay import push_hops
from zaqar_delay.conf import MetricsSettings


@pytest.fixture
def api(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(request, "embedded", metrics=MetricsSettings(max_queue_series=10))


def posted_by_queue(api: Api) -> dict[tuple[str, str], float]:
    result = api.get("/metrics", headers={"Client-ID": None, "X-Project-ID": None})
    assert result.status_code == 200
    found = {}
    for family in text_string_to_metric_families(result.text):
        for sample in family.samples:
            if sample.name == "zaqar_delay_messages_posted_total":
                found[(sample.labels["project"], sample.labels["queue"])] = sample.value
    return found


def test_queues_past_the_limit_share_one_series(api: Api) -> None:
    for i in range(60):
        api.post_messages(f"q{i}", {"body": 1}, {"body": 2})
    posted = posted_by_queue(api)
    named = {key for key in posted if key != ("_other", "_other")}
    assert named == {("project-1", f"q{i}") for i in range(10)}
    assert posted[("_other", "_other")] == 50 * 2
    assert sum(posted.values()) == 60 * 2
    # A queue that has its own series keeps it.
    api.post_messages("q3", {"body": 3})
    assert posted_by_queue(api)[("project-1", "q3")] == 3


def test_the_process_keeps_counters_for_the_limit_and_one_more(api: Api) -> None:
    # Past the limit a queue is counted in "_other": nothing of its own may stay behind in
    # the process, or a client posting to a new queue each time grows it without bound.
    for i in range(60):
        api.post_messages(f"q{i}", {"body": 1})
    assert posted_by_queue(api)[("_other", "_other")] == 50
    assert api.service.metrics.queue_counters_kept() == 10 + 1


def series(api: Api) -> set[str]:
    text = api.get("/metrics").text
    return {line.split(" ")[0] for line in text.splitlines() if not line.startswith("#")}


def test_scrape_does_not_grow_with_queues(api: Api) -> None:
    for i in range(20):
        api.post_messages(f"a{i}", {"body": 1})
    series(api)  # the first scrape adds the /metrics route's own timing series
    at_20 = series(api)
    for i in range(300):
        api.post_messages(f"b{i}", {"body": 1})
    assert series(api) == at_20


def request_series(api: Api) -> set[tuple[str, str]]:
    text = api.get("/metrics").text
    return {
        (sample.labels["method"], sample.labels["route"])
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "zaqar_delay_request_duration_seconds_count"
    }


def test_requests_with_methods_http_does_not_define_share_one_series(api: Api) -> None:
    with pytest.warns(Warning, match="REQUEST_METHOD"):  # falcon's test client warns too
        for method in ("FOO", "BAR", "BAZ"):
            assert api.request(method, "/v2/queues/q/messages").status_code == 400
    found = request_series(api)
    assert ("other", "/v2/queues/{queue_name}/messages") in found
    assert not {method for method, _ in found} & {"FOO", "BAR", "BAZ"}
    api.post_messages("q", {"body": 1})
    assert ("POST", "/v2/queues/{queue_name}/messages") in request_series(api)


def answers(api: Api) -> dict[tuple[str, str, str], float]:
    """``zaqar_delay_responses_total`` by method, route and status."""
    text = api.get("/metrics").text
    return {
        (sample.labels["method"], sample.labels["route"], sample.labels["status"]): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name == "zaqar_delay_responses_total"
    }


def test_answers_are_counted_by_route_and_status_refusals_among_them(api: Api) -> None:
    messages = "/v2/queues/{queue_name}/messages"
    api.post_messages("q", {"body": 1})
    looped = api.post(
        "/v2/queues/q/messages",
        json={"messages": [{"body": 1}]},
        headers={push_hops.HEADER: "99"},
    )
    assert_error(looped, 403, "Push loop refused")
    for _ in range(2):
        assert api.get("/v2/queues/q/messages/nope").status_code == 404
    counted = answers(api)
    assert counted[("POST", messages, "201")] == 1
    assert counted[("POST", messages, "403")] == 1
    assert counted[("GET", messages + "/{message_id}", "404")] == 2
    assert {status for _, _, status in counted} == {"201", "403", "404"}
