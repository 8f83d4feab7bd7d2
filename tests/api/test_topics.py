"""Topics over HTTP on every store: Zaqar's topic lifecycle (upstream's
``test_topic_lifecycle.py`` expectations), a namespace apart from queues, and fan-out by push
at each message's due time, never before."""

from __future__ import annotations

import json

import pytest

from testbed.receiver import receiver
from tests.helpers.api import PROJECT, Api, api_on, assert_error, confirmation_headers
from tests.helpers.push import dispatching, senders
from zaqar_delay import queue_listing
from zaqar_delay.conf import Limits, NotificationSettings, SignedUrlSettings
from zaqar_delay.push.dispatcher import Dispatcher

PATCH = {"Content-Type": "application/openstack-messaging-v2.0-json-patch"}
TOPIC_DEFAULTS = {
    "_max_messages_post_size": 262144,
    "_default_message_ttl": 3600,
    "_default_message_delay": 0,
}


def test_lifecycle(api: Api) -> None:
    assert api.get("/v2/topics/mars/stats").status_code == 200  # not created yet
    created = api.put("/v2/topics/mars", json={"messages": {"ttl": 600}})
    assert created.status_code == 201 and created.headers["location"] == "/v2/topics/mars"
    assert api.get("/v2/topics/mars").json == {"messages": {"ttl": 600}, **TOPIC_DEFAULTS}
    assert api.put("/v2/topics/mars", body="").status_code == 204
    stats = api.get("/v2/topics/mars/stats")
    assert stats.status_code == 200 and stats.json["messages"]["total"] == 0
    assert api.delete("/v2/topics/mars").status_code == 204
    assert api.get("/v2/topics").json == {"topics": [], "links": []}


@pytest.mark.parametrize(
    ("name", "status"),
    [("Nice-Boat_2", 201), ("Nice-Bo@t", 400), ("_" + "niceboat" * 8, 400), ("a.b", 201)],
)
def test_name_restrictions(api: Api, name: str, status: int) -> None:
    result = api.put(f"/v2/topics/{name}")
    assert result.status_code == status, result.text
    if status == 400:
        assert result.json["title"] == "Invalid topic identification"


@pytest.mark.parametrize("document", ["{", "[]", ".", "  "])
def test_bad_metadata(api: Api, document: str) -> None:
    assert api.put("/v2/topics/venus", body=document).status_code == 400
    assert api.get("/v2/topics").json["topics"] == []


def test_update_metadata(api: Api) -> None:
    assert api.put("/v2/topics/xyz").status_code == 201
    add = [
        {"op": "add", "path": "/metadata/key1", "value": 1},
        {"op": "add", "path": "/metadata/key2", "value": 1},
    ]
    assert api.patch("/v2/topics/xyz", body=json.dumps(add), headers=PATCH).status_code == 200
    replace = [{"op": "replace", "path": "/metadata/_default_message_ttl", "value": 300}]
    patched = api.patch("/v2/topics/xyz", body=json.dumps(replace), headers=PATCH)
    assert patched.json == {"key1": 1, "key2": 1, **TOPIC_DEFAULTS, "_default_message_ttl": 300}
    missing = [{"op": "replace", "path": "/metadata/key3", "value": 2}]
    assert api.patch("/v2/topics/xyz", body=json.dumps(missing), headers=PATCH).status_code == 409
    assert api.delete("/v2/topics/xyz").status_code == 204
    gone = api.patch("/v2/topics/xyz", body=json.dumps(add), headers=PATCH)
    assert_error(gone, 404, "Not found", f"Topic xyz does not exist for project {PROJECT}")


def test_list_pages_topics_apart_from_queues(api: Api) -> None:
    for name in ("q1", "q2", "q3"):
        assert api.put(f"/v2/topics/{name}", json={"node": int(name[1:]) + 30}).status_code == 201
    assert api.put("/v2/queues/q1", json={"queue": True}).status_code == 201
    assert api.put("/v2/queues/zz").status_code == 201
    assert api.put("/v2/topics/q3", headers={"X-Project-ID": "other"}).status_code == 201
    assert api.get("/v2/topics", query_string="limit=21").status_code == 400

    first = api.get("/v2/topics", query_string="limit=2&detailed=true").json
    assert [t["name"] for t in first["topics"]] == ["q1", "q2"]
    assert first["topics"][0] == {
        "name": "q1",
        "href": "/v2/topics/q1",
        "metadata": {"node": 31, **TOPIC_DEFAULTS},
    }
    href = first["links"][0]["href"]
    assert href.startswith("/v2/topics?")
    path, query = href.split("?")
    rest = api.get(path, query_string=query).json
    assert [t["name"] for t in rest["topics"]] == ["q3"]

    queues = api.get("/v2/queues", query_string="limit=10&with_count=true").json
    assert [q["name"] for q in queues["queues"]] == ["q1", "zz"] and queues["count"] == 2
    counted = api.get("/v2/topics", query_string="with_count=true").json
    assert counted["count"] == 3
    assert api.get("/v2/topics", query_string="marker=zzz").json["topics"] == []


def test_a_topic_and_a_queue_of_one_name_are_apart(api: Api) -> None:
    [queued] = api.post_messages("news", {"body": "to the queue", "ttl": 600})
    posted = api.post("/v2/topics/news/messages", json={"messages": [{"body": "to the topic"}]})
    assert posted.status_code == 201
    [href] = posted.json["resources"]
    assert href.startswith("/v2/topics/news/messages/")
    listed = api.get("/v2/topics/news/messages", query_string="echo=true").json
    assert [m["body"] for m in listed["messages"]] == ["to the topic"]
    assert listed["messages"][0]["href"] == href
    assert api.get(f"/v2/topics/news/messages/{queued}").status_code == 404
    queue_messages = api.get("/v2/queues/news/messages", query_string="echo=true").json
    assert [m["body"] for m in queue_messages["messages"]] == ["to the queue"]
    # A topic serves no claims: its messages are pushed, never claimed.
    assert api.post("/v2/topics/news/claims", json={}).status_code == 404
    assert api.post("/v2/queues/~news/messages", json={"messages": [{"body": 1}]}).status_code == (
        400
    )


def test_purge_and_subscriptions(api: Api) -> None:
    created = api.post(
        "/v2/topics/t/subscriptions",
        json={"subscriber": "http://127.0.0.1:9/hook", "ttl": 3600},
    )
    assert created.status_code == 201, created.text
    sid = created.json["subscription_id"]
    shown = api.get(f"/v2/topics/t/subscriptions/{sid}").json
    assert shown["source"] == "t"
    assert api.get("/v2/queues/t/subscriptions").json["subscriptions"] == []
    assert api.get(f"/v2/queues/t/subscriptions/{sid}").status_code == 404
    listed = api.get("/v2/topics/t/subscriptions").json["subscriptions"]
    assert [s["id"] for s in listed] == [sid]
    api.post("/v2/topics/t/messages", json={"messages": [{"body": 1}]})
    purged = api.post("/v2/topics/t/purge", json={"resource_types": ["messages", "subscriptions"]})
    assert purged.status_code == 204
    assert api.get("/v2/topics/t/stats").json["messages"]["total"] == 0
    assert api.get("/v2/topics/t/subscriptions").json["subscriptions"] == []


def test_each_subscription_gets_each_delayed_message_at_its_due_time(api: Api) -> None:
    with receiver() as first, receiver() as second, dispatching(api) as dispatcher:
        created = api.put("/v2/topics/alerts", json={"_default_message_delay": 30})
        assert created.status_code == 201
        for hook in (first, second):
            subscribed = api.post("/v2/topics/alerts/subscriptions", json={"subscriber": hook.url})
            assert subscribed.status_code == 201, subscribed.text
        posted = api.post(
            "/v2/topics/alerts/messages",
            json={"messages": [{"body": "later"}, {"body": "sooner", "delay": 10}]},
        )
        assert posted.status_code == 201, posted.text
        later, sooner = (href.rsplit("/", 1)[1] for href in posted.json["resources"])
        api.clock.advance(ms=9_999)
        assert dispatcher.run_once() == 0
        assert first.received == [] and second.received == []
        api.clock.advance(ms=1)
        assert dispatcher.run_once() == 2
        pushes = [first.wait_for(1)[0].json(), second.wait_for(1)[0].json()]
        for document in pushes:
            assert document["id"] == sooner and document["queue_name"] == "alerts"
            assert document["href"] == f"/v2/topics/alerts/messages/{sooner}"
        api.clock.advance(ms=19_999)
        assert dispatcher.run_once() == 0
        api.clock.advance(ms=1)
        assert dispatcher.run_once() == 2
        assert [p.json()["id"] for p in first.wait_for(2)] == [sooner, later]
        assert [p.json()["id"] for p in second.wait_for(2)] == [sooner, later]
        assert dispatcher.run_once() == 0  # each message once per subscription
        # Topic messages stay until their TTL, as in Zaqar.
        total = api.get("/v2/topics/alerts/stats").json["messages"]["total"]
        assert total == 2


def test_topics_count_against_the_queue_quota(request: pytest.FixtureRequest) -> None:
    """A member cannot pass ``max_queues_per_project`` by making topics instead."""
    for limited in api_on(request, "embedded", limits=Limits(max_queues_per_project=3)):
        assert limited.put("/v2/queues/a").status_code == 201
        assert limited.put("/v2/topics/b").status_code == 201
        assert limited.put("/v2/topics/c").status_code == 201
        refused = limited.put("/v2/topics/d")
        assert_error(refused, 403, "Quota exceeded")
        assert [t["name"] for t in limited.get("/v2/topics").json["topics"]] == ["b", "c"]
        assert limited.delete("/v2/queues/a").status_code == 204
        assert limited.put("/v2/topics/d").status_code == 201


def test_a_topic_subscription_is_confirmed_through_its_topic_path(
    request: pytest.FixtureRequest,
) -> None:
    confirming = api_on(
        request,
        "embedded",
        notification=NotificationSettings(require_confirmation=True),
        signed_url=SignedUrlSettings(secret_key="s" * 32),
    )
    for api in confirming:
        dispatcher = Dispatcher(api.service, senders(), require_confirmation=True)
        try:
            with receiver() as hook:
                created = api.post("/v2/topics/t/subscriptions", json={"subscriber": hook.url})
                sid = created.json["subscription_id"]
                document = hook.wait_for(1)[0].json()
                assert document["Message"] == "You have chosen to subscribe to the topic: t"
                assert document["queue_name"] == "t"
                assert document["URL-Paths"] == f"/v2/topics/t/subscriptions/{sid}/confirm"
                headers = confirmation_headers(document)
                # The signature is the topic's: the queue of the same name is not covered.
                queue_path = f"/v2/queues/t/subscriptions/{sid}/confirm"
                assert api.put(
                    queue_path, json={"confirmed": True}, headers=headers
                ).status_code == (404)
                confirmed = api.put(
                    document["URL-Paths"], json={"confirmed": True}, headers=headers
                )
                assert confirmed.status_code == 204, confirmed.text
                assert api.get(f"/v2/topics/t/subscriptions/{sid}").json["confirmed"] is True
                api.post("/v2/topics/t/messages", json={"messages": [{"body": "after"}]})
                assert dispatcher.run_once() == 1
                assert hook.wait_for(2)[1].json()["body"] == "after"
        finally:
            dispatcher.stop()


def test_another_project_reaches_none_of_a_topic(api: Api) -> None:
    api.post("/v2/topics/t/messages", json={"messages": [{"body": "secret"}]})
    created = api.post("/v2/topics/t/subscriptions", json={"subscriber": "http://127.0.0.1:9/h"})
    sid = created.json["subscription_id"]
    [message] = api.get("/v2/topics/t/messages", query_string="echo=true").json["messages"]
    other = {"headers": {"X-Project-ID": "project-2"}}
    assert api.get("/v2/topics", **other).json["topics"] == []
    listed = api.get("/v2/topics/t/messages", query_string="echo=true", **other)
    assert listed.json == {"messages": [], "links": []}
    assert api.get(message["href"], **other).status_code == 404
    assert api.get(f"/v2/topics/t/subscriptions/{sid}", **other).status_code == 404
    assert api.delete(message["href"], **other).status_code == 204
    assert api.delete(f"/v2/topics/t/subscriptions/{sid}", **other).status_code == 204
    assert api.get(message["href"]).status_code == 200
    assert api.get(f"/v2/topics/t/subscriptions/{sid}").status_code == 200


def test_list_filters_by_name_and_metadata(api: Api) -> None:
    """Upstream's ``test_list_with_filter``, and the same filters on queues."""
    for name, metadata in (
        ("q1", {"test_metadata_key1": "value1"}),
        ("q2", {"_max_messages_post_size": 2000}),
        ("q3", {"test_metadata_key2": 30}),
    ):
        assert api.put(f"/v2/topics/{name}", json=metadata).status_code == 201
        assert api.put(f"/v2/queues/{name}", json=metadata).status_code == 201
    for collection in ("topics", "queues"):
        listed = api.get(f"/v2/{collection}", query_string="name=q&test_metadata_key2=30").json
        assert [t["name"] for t in listed[collection]] == ["q3"]
        sized = api.get(f"/v2/{collection}", query_string="_max_messages_post_size=2000").json
        assert [t["name"] for t in sized[collection]] == ["q2"]
        assert len(api.get(f"/v2/{collection}", query_string="name=q").json[collection]) == 3
        assert api.get(f"/v2/{collection}", query_string="node=34").json == {
            collection: [],
            "links": [],
        }
        assert [
            t["name"] for t in api.get(f"/v2/{collection}", query_string="name=2").json[collection]
        ] == ["q2"]


def test_a_filtered_page_reads_a_bounded_number_of_names_and_links_on(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(queue_listing, "FILTER_SCAN_BUDGET", 2)
    monkeypatch.setattr(queue_listing, "SCAN_PAGE", 2)
    for n in range(5):
        assert api.put(f"/v2/topics/t{n}", json={"wanted": n == 4}).status_code == 201
    path, query, found = "/v2/topics", "wanted=True&limit=5", []
    pages = 0
    while True:
        listed = api.get(path, query_string=query).json
        pages += 1
        found += [t["name"] for t in listed["topics"]]
        if not listed["links"]:
            break
        path, query = listed["links"][0]["href"].split("?")
        assert "wanted=True" in query
    # Metadata values compare as stored: JSON true is not the text "True".
    assert found == [] and pages == 3
    for n in range(5):
        api.delete(f"/v2/topics/t{n}")
    for n in range(5):
        assert api.put(f"/v2/topics/t{n}", json={"wanted": "yes" if n == 4 else "no"}).status_code
    first = api.get("/v2/topics", query_string="wanted=yes").json
    assert first["topics"] == [] and first["links"]  # two names read, none matched: link on
    path, query = first["links"][0]["href"].split("?")
    second = api.get(path, query_string=query).json
    assert second["topics"] == [] and second["links"]
    path, query = second["links"][0]["href"].split("?")
    assert [t["name"] for t in api.get(path, query_string=query).json["topics"]] == ["t4"]


def test_a_push_that_fails_for_good_is_dead_lettered_naming_the_topic(api: Api) -> None:
    assert api.put("/v2/topics/t", json={"_dead_letter_queue": "dead"}).status_code == 201
    with receiver(statuses=[404]) as hook, dispatching(api) as dispatcher:
        subscribed = api.post("/v2/topics/t/subscriptions", json={"subscriber": hook.url})
        sid = subscribed.json["subscription_id"]
        posted = api.post("/v2/topics/t/messages", json={"messages": [{"body": "b"}]})
        [mid] = (href.rsplit("/", 1)[1] for href in posted.json["resources"])
        assert dispatcher.run_once() == 1
        assert hook.wait_for(1)[0].status == 404
        [dead] = api.get("/v2/queues/dead/messages", query_string="echo=true").json["messages"]
        assert dead["body"]["subscription_id"] == sid
        assert dead["body"]["last_error"] == "HTTP 404"
        assert dead["body"]["message"]["href"] == f"/v2/topics/t/messages/{mid}"
        assert dead["body"]["message"]["queue_name"] == "t"
