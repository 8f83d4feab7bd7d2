"""Property-based fuzz of subscription bodies, options and subscriber URIs: whatever a tenant
sends to create or change a subscription, the answer is a 2xx or a 4xx with Zaqar's error
shape, never a 500, a refused create or change writes nothing, and a subscription it accepts
can be pushed: its request, or its mail, is made as a dispatcher makes it. Hosts are IP
literals (of every form the guard reads) or ``localhost``, so the fuzz asks no name server."""

from __future__ import annotations

import http.client
import ipaddress
import json
from typing import Any

import hypothesis.strategies as st
from hypothesis import given

from tests.helpers.api import CLIENT_ID, PROJECT, Api
from tests.helpers.fuzz import FUZZ, assert_no_server_error, hostile_text, json_values
from zaqar_delay.conf import NotificationSettings
from zaqar_delay.models import Delivery, Message
from zaqar_delay.push.guard import AddressGuard
from zaqar_delay.push.mail import MailSender, is_mailto
from zaqar_delay.push.webhook import PushTooLarge, WebhookSender

SUBS = "/v2/queues/q/subscriptions"

hosts = st.one_of(
    st.ip_addresses(v=4).map(str),
    st.ip_addresses(v=6).map(lambda ip: f"[{ip}]"),
    st.ip_addresses(v=4).map(lambda ip: f"[::ffff:{ip}]"),
    st.ip_addresses(v=4).map(lambda ip: f"[64:ff9b::{int(ipaddress.IPv4Address(ip)):x}]"),
    st.sampled_from(["localhost", "0", "[::]", "[fe80::1%25eth0]", "[::1", "[zz]", "a\uff03b"]),
)
urls = st.builds(
    lambda scheme, userinfo, host, port, path: f"{scheme}{userinfo}{host}{port}{path}",
    st.sampled_from(["http://", "https://", "HTTP://", "ftp://", "trust+http://"]),
    st.sampled_from(["", "user:pw@", "a@b@"]) | hostile_text.map(lambda t: t + "@"),
    hosts,
    st.sampled_from(["", ":80", ":0", ":99999", ":-1", ":x"]),
    hostile_text,
)
subscribers = st.one_of(
    urls,
    urls,  # twice: most subscribers are URLs, where the hostile parsing is
    st.text(max_size=30),
    st.builds(
        lambda local, domain, query: f"mailto:{local}@{domain}{query}",
        hostile_text,
        hostile_text,
        st.sampled_from(["", "?subject=hi", "?cc=x@y", "?subject=a%0D%0AB"]) | hostile_text,
    ),
)
retry_policies = st.dictionaries(
    st.sampled_from(
        [
            "retries_with_no_delay",
            "minimum_delay_retries",
            "minimum_delay",
            "maximum_delay",
            "maximum_delay_retries",
            "retry_backoff_function",
            "ignore_subscription_override",
        ]
    ),
    json_values,
)
options = st.fixed_dictionaries(
    {},
    optional={
        "post_headers": st.dictionaries(hostile_text, json_values | hostile_text, max_size=4)
        | json_values,
        "post_data": json_values | hostile_text,
        "_retry_policy": retry_policies | json_values,
        "from": hostile_text | json_values | st.just("zaqar-delay@localhost"),
        "subject": hostile_text | json_values,
        "_max_dispatches_per_second": json_values,
        "_max_concurrent_dispatches": json_values,
    },
)
documents = st.one_of(
    json_values,
    st.fixed_dictionaries(
        {},
        optional={"subscriber": subscribers | json_values, "ttl": json_values, "options": options},
    ),
)


def assert_pushable(api: Api, subscription_id: str) -> None:
    """The stored subscription's push of a message can be made: its webhook request, headers
    as ``http.client`` takes them, or its mail, as bytes to send. (A template naming the
    message too often is a push too large, which fails for good by design.)"""
    now_ms = api.clock.now_ms()
    subscription = api.store("q").get_subscription(PROJECT, "q", subscription_id, now_ms)
    assert subscription is not None
    # A body with a lone surrogate: a body may hold one (it stays a JSON escape).
    body = {"text": "d\u00e9j\u00e0 \u2713", "lone": "\ud800"}
    message = Message("m1", body, 60, now_ms, now_ms + 60_000, now_ms, None, 0, CLIENT_ID)
    delivery = Delivery(
        f"{subscription.id}:m1", PROJECT, "q", subscription, message, 0, "l", now_ms, {}
    )
    if is_mailto(subscription.subscriber):
        sender = MailSender("", 0, NotificationSettings().smtp_sender, 1.0)
        assert sender.mail(delivery, now_ms).as_bytes()
        return
    try:
        _, headers = WebhookSender(AddressGuard(), 1.0).request(delivery, now_ms)
    except PushTooLarge:
        return
    connection = http.client.HTTPConnection("127.0.0.1")  # never connected: headers only
    connection.putrequest("POST", "/")
    for name, value in headers.items():
        connection.putheader(name, value)


@FUZZ
@given(create=documents, change=documents)
def test_no_subscription_body_is_a_server_error(api: Api, create: Any, change: Any) -> None:
    headers = {"Content-Type": "application/json"}
    created = api.post(SUBS, body=json.dumps(create).encode(), headers=headers)
    assert_no_server_error(created)
    if created.status_code != 201:
        assert api.get(SUBS).json["subscriptions"] == []  # a refused create stores nothing
        return
    sid = created.json["subscription_id"]
    before = api.get(f"{SUBS}/{sid}")
    patched = api.patch(f"{SUBS}/{sid}", body=json.dumps(change).encode(), headers=headers)
    assert_no_server_error(patched)
    after = api.get(f"{SUBS}/{sid}")
    assert_no_server_error(after)
    if patched.status_code >= 400:  # a refused change changes nothing
        assert after.json == before.json
    assert api.delete(f"{SUBS}/{sid}").status_code == 204


@FUZZ
@given(subscriber=subscribers, options=options)
def test_no_subscriber_is_a_server_error(api: Api, subscriber: str, options: Any) -> None:
    document = {"subscriber": subscriber, "options": options}
    headers = {"Content-Type": "application/json"}
    created = api.post(SUBS, body=json.dumps(document).encode(), headers=headers)
    assert_no_server_error(created)
    if created.status_code == 201:
        assert api.delete(f"{SUBS}/{created.json['subscription_id']}").status_code == 204
    else:
        assert api.get(SUBS).json["subscriptions"] == []  # a refused create stores nothing


# Subscriptions that are valid but for the free text in them: where a push carries text.
# Besides hostile text, the values a push must carry verbatim: non-ASCII text, a lone surrogate
# (which only a JSON escape can carry) and the template's placeholder.
free_text = (
    hostile_text
    | st.text(max_size=30)
    | st.sampled_from(["d\u00e9j\u00e0 \u2713", "\ud800", "a\udfff $zaqar_message$"])
)
pushable_options = st.builds(
    lambda named, extra: {**extra, **named},
    st.fixed_dictionaries(
        {},
        optional={
            "post_data": free_text | json_values,
            "subject": free_text,
            "post_headers": st.dictionaries(st.sampled_from(["X-Team", "X-Trace"]), free_text),
        },
    ),
    st.dictionaries(free_text, json_values, max_size=2),
)
pushable_subscribers = st.sampled_from(
    [
        "http://192.0.2.1:8080/hook",
        "https://[2001:db8::1]/x?token=t",
        "mailto:ops@example.com",
        "mailto:ops@example.com?subject=Due%20now",
    ]
)


@FUZZ
@given(subscriber=pushable_subscribers, options=pushable_options, change=pushable_options)
def test_an_accepted_subscription_can_be_pushed(
    api: Api, subscriber: str, options: Any, change: Any
) -> None:
    document = {"subscriber": subscriber, "options": options}
    headers = {"Content-Type": "application/json"}
    created = api.post(SUBS, body=json.dumps(document).encode(), headers=headers)
    assert_no_server_error(created)
    if created.status_code == 201:
        sid = created.json["subscription_id"]
        assert_pushable(api, sid)
        patched = api.patch(f"{SUBS}/{sid}", body=json.dumps({"options": change}), headers=headers)
        assert_no_server_error(patched)
        assert_pushable(api, sid)
        assert api.delete(f"{SUBS}/{sid}").status_code == 204
