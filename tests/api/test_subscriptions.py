"""The Zaqar v2 subscription routes: bodies, status codes and wording as Zaqar's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.api import Api, api_on, assert_error
from zaqar_delay.conf import NotificationSettings

SUBS = "/v2/queues/q/subscriptions"
HOOK = "http://127.0.0.1:9/hook"


def subscribe(api: Api, subscriber: str = HOOK, **fields: Any) -> str:
    created = api.post(SUBS, json={"subscriber": subscriber, **fields})
    assert created.status_code == 201, created.text
    assert created.headers["location"] == SUBS
    return str(created.json["subscription_id"])


def test_create_show_list_update_delete(api: Api) -> None:
    sid = subscribe(api, ttl=600, options={"post_headers": {"X-A": "1"}})
    assert api.get("/v2/queues/q").status_code == 200  # the queue was created
    api.clock.advance(seconds=7)
    shown = api.get(f"{SUBS}/{sid}")
    assert shown.status_code == 200
    assert shown.json == {
        "id": sid,
        "source": "q",
        "subscriber": HOOK,
        "ttl": 600,
        "age": 7,
        "options": {"post_headers": {"X-A": "1"}},
        "confirmed": False,
    }
    listed = api.get(SUBS)
    assert [s["id"] for s in listed.json["subscriptions"]] == [sid]
    assert listed.json["links"] == [{"rel": "next", "href": f"{SUBS}?marker={sid}&limit=10"}]
    assert api.get(f"{SUBS}?marker={sid}").json == {"subscriptions": [], "links": []}
    updated = api.patch(f"{SUBS}/{sid}", json={"ttl": 120, "subscriber": "mailto:a@example.com"})
    assert updated.status_code == 204
    shown = api.get(f"{SUBS}/{sid}").json
    assert (shown["ttl"], shown["age"], shown["subscriber"]) == (120, 0, "mailto:a@example.com")
    assert api.delete(f"{SUBS}/{sid}").status_code == 204
    assert api.delete(f"{SUBS}/{sid}").status_code == 204
    assert api.get(f"{SUBS}/{sid}").status_code == 404


def test_defaults_and_expiry(api: Api) -> None:
    sid = subscribe(api)
    shown = api.get(f"{SUBS}/{sid}").json
    assert (shown["ttl"], shown["options"]) == (3600, {})
    api.clock.advance(seconds=3600)
    assert api.get(f"{SUBS}/{sid}").status_code == 404
    assert api.get(SUBS).json["subscriptions"] == []


def test_subscribing_again_answers_the_unconfirmed_one_and_conflicts_once_confirmed(
    api: Api,
) -> None:
    sid = subscribe(api, ttl=600)
    again = api.post(SUBS, json={"subscriber": HOOK, "ttl": 900})
    assert again.status_code == 201  # Zaqar's rule, python-zaqarclient tests it
    assert again.json == {"subscription_id": sid}  # the signing secret is shown once only
    assert api.get(f"{SUBS}/{sid}").json["ttl"] == 600  # unchanged
    confirm = {"confirmed": True}
    assert api.request("PUT", f"{SUBS}/{sid}/confirm", json=confirm).status_code == 204
    again = api.post(SUBS, json={"subscriber": HOOK})
    assert_error(
        again,
        409,
        "Resource conflict",
        "Such subscription already exists.Subscriptions are unique by project + queue + "
        "subscriber URI.",
    )
    other = subscribe(api, "http://127.0.0.1:9/other")
    taken = api.patch(f"{SUBS}/{other}", json={"subscriber": HOOK})
    assert taken.status_code == 409


def test_confirm(api: Api) -> None:
    sid = subscribe(api)
    assert api.request("PUT", f"{SUBS}/{sid}/confirm", json={"confirmed": True}).status_code == 204
    assert api.get(f"{SUBS}/{sid}").json["confirmed"] is True
    refused = api.request("PUT", f"{SUBS}/{sid}/confirm", json={"confirmed": "yes"})
    assert_error(refused, 400, "Invalid API request", "The 'confirmed' should be boolean.")
    missing = api.request("PUT", f"{SUBS}/nothing/confirm", json={"confirmed": True})
    assert missing.status_code == 404


def test_purge_subscriptions_keeps_messages(api: Api) -> None:
    sid = subscribe(api)
    api.post_messages("q", {"body": 1})
    purge = api.post("/v2/queues/q/purge", json={"resource_types": ["subscriptions"]})
    assert purge.status_code == 204
    assert api.get(f"{SUBS}/{sid}").status_code == 404
    assert api.get("/v2/queues/q/stats").json["messages"]["total"] == 1
    subscribe(api)
    assert api.post("/v2/queues/q/purge", json={"resource_types": ["messages"]}).status_code == 204
    assert len(api.get(SUBS).json["subscriptions"]) == 1
    assert api.delete("/v2/queues/q").status_code == 204
    assert api.get(SUBS).json["subscriptions"] == []


@pytest.mark.parametrize(
    ("body", "description"),
    [
        ({}, "Missing parameter subscriber in body."),
        ({"ttl": 60}, "Missing parameter subscriber in body."),
        (
            {"subscriber": "ftp://example.com/x"},
            "The subscriber type of subscription must be supported in the list "
            "['http', 'https', 'mailto', 'trust+http', 'trust+https'].",
        ),
        (
            {"subscriber": "trust+ftp://example.com/x"},
            "The subscriber type of subscription must be supported in the list "
            "['http', 'https', 'mailto', 'trust+http', 'trust+https'].",
        ),
        ({"subscriber": "http:///nohost"}, "The subscriber http:///nohost names no host."),
        (
            {"subscriber": "", "ttl": 0, "options": {}},
            "The subscriber type of subscription must be supported in the list "
            "['http', 'https', 'mailto', 'trust+http', 'trust+https'].",
        ),
        ({"subscriber": "mailto:nobody"}, "A mailto: subscriber needs an e-mail address."),
        ({"subscriber": HOOK, "ttl": "60"}, "TTL must be an integer."),
        (
            {"subscriber": HOOK, "ttl": 59},
            "The TTL for a subscription must be at least 60 seconds long.",
        ),
        ({"subscriber": HOOK, "options": [1]}, "Options must be a dict."),
        (
            {"subscriber": HOOK, "options": {"_retry_policy": {"minimum_delay": "5"}}},
            "Retry policy: minimum_delay must be a integer.",
        ),
        (
            {"subscriber": HOOK, "options": {"_retry_policy": {"retry_backoff_function": "exp"}}},
            "retry_backoff_function only supports linear now.",
        ),
        ([HOOK], "Subscriptions must be a dict."),
    ],
)
def test_bad_bodies_are_refused_with_zaqar_s_wording(api: Api, body: Any, description: str) -> None:
    refused = api.post(SUBS, json=body)
    assert_error(refused, 400, "Invalid API request", description)
    assert api.get("/v2/queues").json["queues"] == []  # nothing created


@pytest.mark.parametrize(
    "options",
    [
        '{"post_data": "{\\"m\\": \\"$zaqar_message$\\", \\"x\\": \\"\\ud800\\"}"}',
        '{"subject": "Due \\udfff"}',
        '{"note\\ud800": 1}',
        '{"nested": {"a": ["\\ud800"]}}',
    ],
)
def test_options_with_a_lone_surrogate_are_refused(api: Api, options: str) -> None:
    """A push sends a ``post_data`` template and a mail subject as UTF-8, which cannot carry
    a lone surrogate (a ``\\ud800`` escape): accepted, every push failed for good."""
    headers = {"Content-Type": "application/json"}
    description = "Options must be Unicode text: no lone surrogate."
    body = f'{{"subscriber": "mailto:ops@example.com", "options": {options}}}'
    assert_error(
        api.post(SUBS, body=body, headers=headers), 400, "Invalid API request", description
    )
    assert api.get("/v2/queues").json["queues"] == []  # nothing created
    sid = subscribe(api, "mailto:ops@example.com", options={"subject": "d\u00e9j\u00e0 \u2713"})
    patch = f'{{"options": {options}}}'
    refused = api.patch(f"{SUBS}/{sid}", body=patch, headers=headers)
    assert_error(refused, 400, "Invalid API request", description)
    assert api.get(f"{SUBS}/{sid}").json["options"] == {"subject": "d\u00e9j\u00e0 \u2713"}


def test_bad_patches_and_limits(api: Api) -> None:
    sid = subscribe(api)
    assert_error(api.patch(f"{SUBS}/{sid}", json={}), 400, "Invalid API request")
    assert api.patch(f"{SUBS}/nothing", json={"ttl": 120}).status_code == 404
    assert_error(
        api.get(f"{SUBS}?limit=21"),
        400,
        "Invalid API request",
        "Limit must be at least 1 and may not be greater than 20.",
    )
    whitespace = api.post(SUBS, body="  ", headers={"Content-Type": "application/json"})
    assert whitespace.status_code == 400


def test_queue_retry_policy_is_checked(api: Api) -> None:
    refused = api.put("/v2/queues/q", json={"_retry_policy": {"ignore_subscription_override": 1}})
    assert_error(
        refused, 400, "Invalid API request", "ignore_subscription_override must be a boolean."
    )
    assert api.put("/v2/queues/q", json={"_retry_policy": {"minimum_delay": 5}}).status_code == 201


@pytest.mark.parametrize(
    "subscriber",
    ["http://169.254.169.254/latest/meta-data", "https://[fe80::1]/x", "http://100.100.100.200/"],
)
def test_link_local_and_metadata_addresses_are_refused(api: Api, subscriber: str) -> None:
    refused = api.post(SUBS, json={"subscriber": subscriber})
    assert_error(refused, 400, "Invalid API request")
    assert "pushes may not reach" in refused.json["description"]


@pytest.fixture
def allowing(request: pytest.FixtureRequest) -> Iterator[Api]:
    yield from api_on(
        request,
        "embedded",
        notification=NotificationSettings(allowed_networks=("169.254.169.0/24",)),
    )


def test_allowed_networks_win_over_denied_ones(allowing: Api) -> None:
    created = allowing.post(SUBS, json={"subscriber": "http://169.254.169.254/hook"})
    assert created.status_code == 201
    assert allowing.post(SUBS, json={"subscriber": "http://169.254.0.1/"}).status_code == 400
