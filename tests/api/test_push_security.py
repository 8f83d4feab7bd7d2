"""Push delivery against a hostile tenant: one test per hole a probe found.

Each test first shows the attack's effect where the fix does not stand in its way (the bytes
reach a loopback receiver, the SMTP server takes every recipient, memory grows), then that the
service refuses it: at subscribe time with a 400, and at send time for a subscription stored
before the rules existed (written to the store directly, as an older release left it).
"""

from __future__ import annotations

import email.message
import email.policy
import hashlib
import hmac
import http.client
import http.server
import ipaddress
import json
import logging
import os
import re
import smtplib
import socket
import stat
import threading
import time
import tracemalloc
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.smtp import Envelope

from testbed.processes import free_port
from testbed.receiver import receiver
from tests.helpers.api import PROJECT, Api, api_on
from tests.helpers.push import dispatching, senders
from zaqar_delay import retry_policy
from zaqar_delay.conf import NotificationSettings
from zaqar_delay.models import NewSubscription
from zaqar_delay.push.guard import AddressGuard, DeniedAddress
from zaqar_delay.push.webhook import WebhookSender
from zaqar_delay.storage.redis.embedded import EmbeddedRedis

SUBS = "/v2/queues/q/subscriptions"
MANUAL = Path(__file__).parents[2] / "doc" / "source" / "manual" / "extensions.rst"


def store_subscription(api: Api, subscriber: str, **options: Any) -> str:
    """A subscription written to the store directly, bypassing the API's rules (as a release
    without them stored it)."""
    sid, created = api.store("q").create_subscription(
        PROJECT, "q", NewSubscription(subscriber, 3600, options, "s" * 43), api.clock.now_ms()
    )
    assert created
    return sid


def last_delivery(api: Api, sid: str) -> dict[str, Any]:
    shown = api.get(f"{SUBS}/{sid}")
    assert shown.status_code == 200, shown.text
    return dict(shown.json["last_delivery"])


class RequestLines:
    """The request lines a server parsed, and how many of its connections have ended."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.ended = 0
        self.changed = threading.Condition()

    def after_connections(self, count: int) -> list[str]:
        """The lines, once ``count`` connections have ended (every request on a connection is
        parsed before it ends)."""
        with self.changed:
            assert self.changed.wait_for(lambda: self.ended >= count, timeout=10)
            return list(self.lines)


@contextmanager
def request_line_recorder() -> Iterator[tuple[str, RequestLines]]:
    """A keep-alive HTTP/1.1 server on loopback that records the request line of every request
    it parses, whatever the method: its base URL and what it recorded."""
    recorded = RequestLines()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle_one_request(self) -> None:
            self.requestline = ""  # kept from the last request when the connection ends
            super().handle_one_request()
            if self.requestline:
                with recorded.changed:
                    recorded.lines.append(self.requestline)

        def finish(self) -> None:
            super().finish()
            with recorded.changed:
                recorded.ended += 1
                recorded.changed.notify_all()

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.rfile.read(length)
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        do_GET = do_POST = _answer

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", recorded
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture(params=["embedded", "mongodb"])
def loopback_denied(request: pytest.FixtureRequest) -> Iterator[Api]:
    """An operator who keeps pushes off this machine."""
    yield from api_on(
        request,
        request.param,
        notification=NotificationSettings(denied_networks=("127.0.0.0/8", "::1/128")),
    )


# -- 1. the address guard ----------------------------------------------------------------------


def test_ipv4_mapped_loopback_is_refused_where_loopback_is_denied(loopback_denied: Api) -> None:
    api = loopback_denied
    with receiver() as hook:
        port = urllib.parse.urlsplit(hook.url).port
        mapped = f"http://[::ffff:127.0.0.1]:{port}/internal/admin"
        # The attack: the mapped form is loopback, and a sender that does not deny it
        # delivers there.
        open_sender = WebhookSender(AddressGuard(), timeout_s=5)
        assert open_sender.post(mapped, b"{}", {}).kind == "delivered"
        assert len(hook.received) == 1
        # Refused when subscribing...
        refused = api.post(SUBS, json={"subscriber": mapped})
        assert refused.status_code == 400, refused.text
        assert "pushes may not reach" in refused.json["description"]
        # ... and when sending, for a subscription stored before.
        sid = store_subscription(api, mapped)
        guard = AddressGuard(deny=["127.0.0.0/8", "::1/128"])
        with dispatching(api, senders(guard)) as dispatcher:
            api.post_messages("q", {"body": "x"})
            assert dispatcher.run_once() == 1
        assert len(hook.received) == 1
        assert last_delivery(api, sid)["outcome"] == "permanent"


METADATA = ipaddress.ip_network("169.254.0.0/16")


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:169.254.169.254",  # IPv4-mapped
        "::ffff:100.100.100.200",  # IPv4-mapped, Alibaba's metadata
        "::169.254.169.254",  # IPv4-compatible
        "::ffff:0:a9fe:a9fe",  # SIIT
        "64:ff9b::a9fe:a9fe",  # NAT64
        "64:ff9b:1::a9fe:a9fe",  # local-use NAT64
        "2002:a9fe:a9fe::1",  # 6to4
        "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.156.254 obfuscated
    ],
)
def test_the_default_guard_denies_metadata_in_every_ipv6_form(address: str) -> None:
    # The attack: as an IPv6 address it is in no IPv4 network the defaults name.
    ip = ipaddress.ip_address(address)
    assert ip not in METADATA and not ip.is_link_local
    assert not AddressGuard().permits(address)


@pytest.mark.parametrize("address", ["0.0.0.0", "0.1.2.3", "::", "fe80::1%eth0", "[fe80::1]"])
def test_unspecified_and_zoned_link_local_addresses_are_denied(address: str) -> None:
    assert not AddressGuard().permits(address)
    # Not even a list that allows everything opens the unspecified addresses or metadata.
    assert not AddressGuard(allow=["0.0.0.0/0", "::/0"]).permits(address)


@pytest.mark.parametrize("host", ["[fe80::1%25eth0]", "[fe80::a9fe:a9fe%25lo]"])
def test_a_zoned_link_local_subscriber_is_refused_when_subscribing(api: Api, host: str) -> None:
    # The attack's material: the zone id as a URI spells it does not resolve, so the address
    # passed as a host name that may resolve later.
    hostname = urllib.parse.urlsplit(f"https://{host}/x").hostname
    assert hostname is not None and "%25" in hostname
    with pytest.raises(OSError):
        socket.getaddrinfo(hostname, 443)
    refused = api.post(SUBS, json={"subscriber": f"https://{host}/x"})
    assert refused.status_code == 400, refused.text
    assert "pushes may not reach" in refused.json["description"]


def test_operator_lists_add_to_the_protected_networks_never_replace_them() -> None:
    # The attack: an operator who denies 10.0.0.0/8 or allows everything.
    for guard in (AddressGuard(deny=["10.0.0.0/8"]), AddressGuard(allow=["0.0.0.0/0"])):
        assert not guard.permits("169.254.169.254")
        assert not guard.permits("100.100.100.200")
    assert not AddressGuard(deny=["10.0.0.0/8"]).permits("10.1.2.3")
    # Only an allowed network inside a protected one opens it.
    assert AddressGuard(allow=["169.254.169.254/32"]).permits("169.254.169.254")
    assert not AddressGuard(allow=["169.254.169.254/32"]).permits("169.254.169.253")


def test_a_denied_address_is_never_connected_to_and_tells_no_port_apart(api: Api) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(5)
    open_port, closed_port = listener.getsockname()[1], free_port()
    try:
        # The attack: "0" reaches this machine; an open and a closed port answer differently.
        socket.create_connection(("0", open_port), timeout=2).close()
        listener.accept()[0].close()
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("0", closed_port), timeout=2)
        # Refused when subscribing, in the same words for both ports.
        answers = [
            api.post(SUBS, json={"subscriber": f"http://0:{port}/"})
            for port in (open_port, closed_port)
        ]
        assert [a.status_code for a in answers] == [400, 400]
        assert answers[0].json == answers[1].json
        # And when sending: the same outcome, and no connection reached the listener.
        sender = WebhookSender(AddressGuard(), timeout_s=5)
        outcomes = [
            sender.post(f"http://0:{port}/", b"{}", {}) for port in (open_port, closed_port)
        ]
        assert outcomes[0] == outcomes[1] and outcomes[0].kind == "permanent"
        assert "refused address" in outcomes[0].error
        # A connection made before post returned would be queued already: nothing waits.
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    finally:
        listener.close()


def test_a_name_is_checked_before_any_connection_is_tried() -> None:
    closed = free_port()
    # The attack: connecting first answers "refused" for a closed port.
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection(("localhost", closed), timeout=1)
    guard = AddressGuard(deny=["127.0.0.0/8", "::1/128"])
    with pytest.raises(DeniedAddress):
        guard.connect(("localhost", closed), timeout=1)
    assert AddressGuard().resolve("127.0.0.1", 80) == [("127.0.0.1", 80)]


# -- 2. request smuggling through post_headers ----------------------------------------------------

SMUGGLED = "GET /smuggled-admin?op=drop HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"


FRAMING = ["Content-Length", "Transfer-Encoding", "connection", "Host", "Upgrade", "TE",
           "Trailer", "Keep-Alive", "Proxy-Authorization", "X-Zaqar-Delay-Signature"]  # fmt: skip


@pytest.mark.parametrize(
    ("headers", "reason"),
    [
        *[({name: "0"}, "set by the service") for name in FRAMING],
        ({"X Bad": "1"}, "not an HTTP token"),
        ({"X-Split": "a\r\nContent-Length: 0"}, "control character"),
        ({"X-Price": "5 \u20ac"}, "holds '\u20ac', beyond Latin-1"),
        ({"X-Obj": {"a": 1}}, "must be a string"),
    ],
)
def test_framing_and_hop_by_hop_post_headers_are_refused(
    api: Api, headers: dict[str, Any], reason: str
) -> None:
    document = {"subscriber": "http://example.com/hook", "options": {"post_headers": headers}}
    refused = api.post(SUBS, json=document)
    assert refused.status_code == 400, refused.text
    assert reason in refused.json["description"]
    created = api.post(SUBS, json={"subscriber": "http://example.com/hook"})
    patched = api.patch(
        f"{SUBS}/{created.json['subscription_id']}", json={"options": document["options"]}
    )
    assert patched.status_code == 400


def test_post_headers_cannot_smuggle_a_second_request(api: Api) -> None:
    with request_line_recorder() as (base, recorded):
        # The attack: what the sender used to send, on one keep-alive connection.
        host, port = urllib.parse.urlsplit(base).hostname, urllib.parse.urlsplit(base).port
        connection = http.client.HTTPConnection(host or "", port)
        connection.request("POST", "/hook", SMUGGLED.encode(), {"Content-Length": "0"})
        connection.getresponse().read()
        connection.close()
        assert recorded.after_connections(1) == [
            "POST /hook HTTP/1.1",
            "GET /smuggled-admin?op=drop HTTP/1.1",
        ]
        # A subscription stored with those options sends one request, its body whole.
        store_subscription(
            api,
            f"{base}/hook",
            post_headers={"Content-Length": "0", "X-Team": "a"},
            post_data=SMUGGLED,
        )
        with dispatching(api) as dispatcher:
            api.post_messages("q", {"body": 1})
            assert dispatcher.run_once() == 1
        # Stopping the dispatcher closed its connection: the receiver has parsed all of it.
        assert recorded.after_connections(2)[2:] == ["POST /hook HTTP/1.1"]


# -- 3. retry policies without bounds ------------------------------------------------------------


def peak_bytes(work: Any) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_retry_policy_is_refused_and_costs_nothing_when_stored(api: Api) -> None:
    huge = {"maximum_delay": 5_000_000}
    # The attack: the full schedule of such a policy, as it used to be built per failed push.
    built = peak_bytes(lambda: [float(d) for d in range(5, huge["maximum_delay"], 5)])
    assert built > 20_000_000
    # Refused in a subscription's options and in queue metadata.
    for policy in (huge, {"retries_with_no_delay": 10**12}, {"minimum_delay": -1}):
        options = {"_retry_policy": policy}
        refused = api.post(SUBS, json={"subscriber": "http://example.com/", "options": options})
        assert refused.status_code == 400, refused.text
        assert api.put("/v2/queues/q", json=options).status_code == 400
    # A stored one (older releases took any number) costs constant memory per retry.
    stored = {"maximum_delay": 10**15, "retries_with_no_delay": 10**12}
    assert peak_bytes(lambda: retry_policy.retry_delay_s(stored, 10**13)) < 10_000
    with receiver(statuses=[503]) as hook:
        sid = store_subscription(api, hook.url, _retry_policy=stored)
        with dispatching(api) as dispatcher:
            api.post_messages("q", {"body": 1})
            assert peak_bytes(dispatcher.run_once) < 5_000_000
        assert last_delivery(api, sid)["outcome"] == "retry"


def test_a_template_naming_the_message_many_times_fails_unsent_and_costs_no_memory(
    api: Api,
) -> None:
    """A ``post_data`` of 54 KB naming the message 3,000 times made a 50 KB message a push
    of 150 MB, built in the dispatcher's memory and sent to whatever the subscriber names."""
    template = "[" + ",".join(['"$zaqar_message$"'] * 3000) + "]"
    message = {"body": "x" * 2000, "ttl": 600}
    # The attack: the body such a template made of a 2 KB message, as it used to be built.
    assert len(template.replace('"$zaqar_message$"', json.dumps(message))) > 6_000_000
    with receiver() as hook:
        created = api.post(SUBS, json={"subscriber": hook.url, "options": {"post_data": template}})
        assert created.status_code == 201, created.text
        sid = created.json["subscription_id"]
        with dispatching(api) as dispatcher:
            api.post_messages("q", message)
            assert peak_bytes(dispatcher.run_once) < 2_000_000
        assert hook.received == []
    shown = last_delivery(api, sid)
    assert shown["outcome"] == "permanent"
    assert (
        "more than the 327680 a push may send (post_data holds the message 3000 times)"
        in (shown["detail"])
    )


def test_a_template_naming_the_largest_message_once_is_sent(api: Api) -> None:
    with receiver() as hook:
        options = {"post_data": {"messages": [{"body": "$zaqar_message$"}], "pad": "p" * 60_000}}
        created = api.post(SUBS, json={"subscriber": hook.url, "options": options})
        assert created.status_code == 201, created.text
        largest = 262_144 - len('{"messages": [{"body": ""}]}') - 100
        with dispatching(api) as dispatcher:
            api.post_messages("q", {"body": "y" * largest})
            dispatcher.run_once()
        [push] = hook.wait_for(1)
    assert push.json()["messages"][0]["body"]["body"] == "y" * largest


# -- 4. mail -------------------------------------------------------------------------------------


def test_a_mail_subscriber_names_one_recipient(
    api: Api, smtp_inbox: tuple[int, list[Envelope]]
) -> None:
    port, received = smtp_inbox
    # The attack: a To of several addresses is sent to each of them.
    mail = email.message.EmailMessage()
    mail["To"], mail["From"] = "a@b.c,evil1@x.y,evil2@x.y", "zd@example.com"
    mail.set_content("x")
    with smtplib.SMTP("127.0.0.1", port) as smtp:
        smtp.send_message(mail)
    assert received[0].rcpt_tos == ["a@b.c", "evil1@x.y", "evil2@x.y"]
    received.clear()
    lists = [
        "mailto:a@b.c,evil1@x.y,evil2@x.y",
        "mailto:victim@b.c%2C%20evil3@x.y",
        "mailto:a@b.c?cc=evil@x.y",
        "mailto:a@b.c?BCC=evil@x.y",
        "mailto:Victim%20%3Cv@b.c%3E",
    ]
    for subscriber in lists:
        refused = api.post(SUBS, json={"subscriber": subscriber})
        assert refused.status_code == 400, subscriber
    with dispatching(api, senders(smtp_port=port)) as dispatcher:
        sid = store_subscription(api, lists[1])
        api.post_messages("q", {"body": 1})
        assert dispatcher.run_once() == 1
    assert received == []
    assert last_delivery(api, sid)["outcome"] == "permanent"


def test_options_from_is_one_of_the_operator_s_senders(
    api: Api, smtp_inbox: tuple[int, list[Envelope]]
) -> None:
    port, received = smtp_inbox
    # The attack: the SMTP server takes any sender it is given.
    with smtplib.SMTP("127.0.0.1", port) as smtp:
        smtp.sendmail("ceo@bank.example", ["victim@example.com"], b"Subject: pay\r\n\r\nnow")
    assert received[0].mail_from == "ceo@bank.example"
    received.clear()
    forged = {"subscriber": "mailto:victim@example.com", "options": {"from": "ceo@bank.example"}}
    refused = api.post(SUBS, json=forged)
    assert refused.status_code == 400 and "smtp_allowed_senders" in refused.json["description"]
    own = {"subscriber": "mailto:ops@example.com", "options": {"from": "zaqar-delay@localhost"}}
    assert api.post("/v2/queues/own/subscriptions", json=own).status_code == 201
    with dispatching(api, senders(smtp_port=port)) as dispatcher:
        sid = store_subscription(api, forged["subscriber"], **forged["options"])  # type: ignore[arg-type]
        api.post_messages("q", {"body": 1})
        dispatcher.run_once()
    assert all(envelope.mail_from == "zd@example.com" for envelope in received)
    assert last_delivery(api, sid)["outcome"] == "permanent"


def test_line_breaks_in_mail_fields_are_refused_and_fail_a_stored_push_for_good(
    api: Api, smtp_inbox: tuple[int, list[Envelope]], caplog: pytest.LogCaptureFixture
) -> None:
    port, received = smtp_inbox
    # The attack: the mail library raises on such a header, in the sender.
    with pytest.raises(ValueError, match="linefeed or carriage return"):
        email.message.EmailMessage()["Subject"] = "hi\r\nBcc: evil@x.y"
    for document in (
        {"subscriber": "mailto:a@b.c?subject=hi%0D%0ABcc:%20evil@x.y"},
        {"subscriber": "mailto:a@b.c", "options": {"subject": "hi\r\nBcc: evil@x.y"}},
        {"subscriber": "mailto:a@b.c", "options": {"from": "zaqar-delay@localhost\r\nBcc: e@x.y"}},
    ):
        assert api.post(SUBS, json=document).status_code == 400, document
    assert api.put("/v2/queues/q", json={"_dead_letter_queue": "dead"}).status_code == 201
    sid = store_subscription(api, "mailto:a@b.c", subject="hi\r\nBcc: evil@x.y")
    with dispatching(api, senders(smtp_port=port)) as dispatcher:
        api.post_messages("q", {"body": 1})
        with caplog.at_level(logging.WARNING):
            assert dispatcher.run_once() == 1
            api.clock.advance(60)
            assert dispatcher.run_once() == 0  # failed for good: no retry
    assert received == []
    assert last_delivery(api, sid)["outcome"] == "permanent"
    [dead] = api.get("/v2/queues/dead/messages?echo=true").json["messages"]
    assert "subject" in dead["body"]["last_error"]
    assert not [record for record in caplog.records if record.exc_info]


def test_the_mail_signature_header_arrives_unencoded(
    api: Api, smtp_inbox: tuple[int, list[Envelope]]
) -> None:
    port, received = smtp_inbox
    stamp = "t=1764120000000,v2=" + "a" * 64
    # The attack on the check: folded by the default policy, the header arrives encoded.
    folded = email.message.EmailMessage()
    folded["X-Zaqar-Delay-Signature"] = stamp
    assert b"=?utf-8?q?" in folded.as_bytes(policy=email.policy.SMTP)
    created = api.post(SUBS, json={"subscriber": "mailto:ops@example.com"})
    with dispatching(api, senders(smtp_port=port)) as dispatcher:
        api.post_messages("q", {"body": 1})
        assert dispatcher.run_once() == 1
    [envelope] = received
    raw = envelope.original_content or b""
    header = re.search(rb"^X-Zaqar-Delay-Signature: (.*)$", raw, re.MULTILINE | re.IGNORECASE)
    assert header is not None and b"=?" not in header.group(1)
    fields = dict(p.split("=", 1) for p in header.group(1).decode().strip().split(","))
    delivery = re.search(rb"^X-Zaqar-Delay-Delivery-Id: (.*)$", raw, re.MULTILINE | re.IGNORECASE)
    assert delivery is not None
    body = raw.split(b"\r\n\r\n", 1)[1].rstrip(b"\r\n")
    signed = f"{fields['t']}.{delivery.group(1).decode().strip()}.".encode() + body
    secret = created.json["signing_secret"].encode()
    assert hmac.compare_digest(fields["v2"], hmac.new(secret, signed, hashlib.sha256).hexdigest())


# -- 5. smaller ----------------------------------------------------------------------------------


# What the probe sent (each raised in the standard library: the 500s), and more of the kind.
PROBED = ["http://[::1/", "http://[zz]/", "http://a\uff03b@h.invalid/", "http://h.invalid/\ud800"]
MALFORMED = [
    *PROBED,
    "http://h.invalid:99999/",
    "http://h.invalid/a b",
    "http://h.invalid/\x00",
]


@pytest.mark.parametrize("subscriber", PROBED)
def test_the_probed_subscribers_break_the_standard_library(subscriber: str) -> None:
    with pytest.raises((ValueError, UnicodeError)):
        urllib.parse.urlsplit(subscriber).hostname  # noqa: B018
        subscriber.encode()


@pytest.mark.parametrize("subscriber", MALFORMED)
def test_malformed_subscribers_are_a_400_not_a_500(api: Api, subscriber: str) -> None:
    body = json.dumps({"subscriber": subscriber}).encode()  # \ud800 as JSON's escape
    created = api.post(SUBS, json={"subscriber": "http://example.com/"})
    sid = created.json["subscription_id"]
    for answer in (
        api.post(SUBS, body=body, headers={"Content-Type": "application/json"}),
        api.patch(f"{SUBS}/{sid}", body=body, headers={"Content-Type": "application/json"}),
    ):
        assert answer.status_code == 400, answer.text
        assert answer.json["title"] and answer.json["description"]


@pytest.mark.parametrize("name", [".", "..", "%2E", "%2e%2E"])
def test_dot_segment_queue_names_are_refused(api: Api, name: str) -> None:
    # The attack: a URL with the name as a path step loses it.
    assert urllib.parse.urljoin("http://h/", "/v2/queues/./stats") == "http://h/v2/queues/stats"
    assert api.put(f"/v2/queues/{name}").status_code == 400
    assert (
        api.post(f"/v2/queues/{name}/messages", json={"messages": [{"body": 1}]}).status_code == 400
    )
    assert (
        api.put("/v2/queues/q", json={"_dead_letter_queue": urllib.parse.unquote(name)}).status_code
        == 400
    )
    assert api.put("/v2/queues/a.b").status_code == 201  # Zaqar's names with dots still work


def readme_verifier() -> Any:
    """The receiver's check the manual gives, as a function."""
    block = MANUAL.read_text().split("def verified(", 1)[1].split("\n\n", 1)[0]
    source = "import hashlib, hmac, time\ndef verified(" + block
    namespace: dict[str, Any] = {}
    exec(compile(source.replace("\n        ", "\n"), "extensions.rst", "exec"), namespace)
    return namespace["verified"]


def test_a_signature_binds_the_delivery_id_and_the_readme_check_refuses_old_ones(
    api: Api,
) -> None:
    verified = readme_verifier()
    api.clock.advance(ms=int(time.time() * 1000) - api.clock.now_ms())  # real time, for the check
    with receiver() as hook:
        secret = api.post(SUBS, json={"subscriber": hook.url}).json["signing_secret"]
        with dispatching(api) as dispatcher:
            api.post_messages("q", {"body": 1})
            assert dispatcher.run_once() == 1
        [push] = hook.wait_for(1)
    assert verified(push.headers, push.body, secret)
    # The attack: the same request replayed under another delivery id, or much later.
    assert not verified({**push.headers, "X-Zaqar-Delay-Delivery-Id": "other:1"}, push.body, secret)
    stamp = push.headers["X-Zaqar-Delay-Signature"]
    sent_ms = int(stamp.split(",")[0][2:])
    old_ms = sent_ms - 1_070_000
    delivery_id = push.headers["X-Zaqar-Delay-Delivery-Id"]
    mac = hmac.new(secret.encode(), f"{old_ms}.{delivery_id}.".encode() + push.body, "sha256")
    old = {**push.headers, "X-Zaqar-Delay-Signature": f"t={old_ms},v2={mac.hexdigest()}"}
    assert hmac.compare_digest(  # authentic, but 1,070 s old: refused
        old["X-Zaqar-Delay-Signature"].split("v2=")[1], mac.hexdigest()
    )
    assert not verified(old, push.body, secret)


def test_logs_and_dead_letters_show_no_subscriber_password_or_query_value(
    api: Api, caplog: pytest.LogCaptureFixture
) -> None:
    subscriber = f"http://user:s3cret-pw@127.0.0.1:{free_port()}/hook?code=s3cret-tk&v=2"
    assert api.put("/v2/queues/q", json={"_dead_letter_queue": "dead"}).status_code == 201
    created = api.post(SUBS, json={"subscriber": subscriber, "options": {"_retry_policy": {
        "retries_with_no_delay": 0, "minimum_delay_retries": 0, "maximum_delay": 5,
        "minimum_delay": 5, "maximum_delay_retries": 0}}})  # fmt: skip
    assert created.status_code == 201, created.text
    # The attack's material: the password is stored with the subscriber.
    shown = api.get(f"{SUBS}/{created.json['subscription_id']}").text
    assert "s3cret-pw" in shown and "s3cret-tk" in shown
    with dispatching(api) as dispatcher:
        api.post_messages("q", {"body": 1})
        with caplog.at_level(logging.DEBUG, logger="zaqar_delay"):
            assert dispatcher.run_once() == 1
    assert any("failed for good" in record.getMessage() for record in caplog.records)
    ours = [record for record in caplog.records if record.name.startswith("zaqar_delay")]
    logged = "\n".join(record.getMessage() for record in ours)
    assert "s3cret-pw" not in logged and "s3cret-tk" not in logged
    assert "/hook?code=***&v=***" in logged
    [dead] = api.get("/v2/queues/dead/messages?echo=true").json["messages"]
    assert "s3cret" not in dead["body"]["subscriber"]
    assert dead["body"]["subscriber"].startswith("http://user:***@127.0.0.1:")
    assert dead["body"]["subscriber"].endswith("/hook?code=***&v=***")


def test_the_embedded_store_s_files_are_its_owner_s_alone(tmp_path: Path) -> None:
    older = tmp_path / "older"
    older.mkdir()
    (older / "redis.conf").write_text("# left by an older release\n")
    os.chmod(older / "redis.conf", 0o644)
    # The attack's material: an older store's files are readable by every user.
    assert os.stat(older / "redis.conf").st_mode & stat.S_IROTH
    for directory in (tmp_path / "new" / "data", older):
        store = EmbeddedRedis(str(directory / "store.db"), appendfsync="everysec")
        try:
            client = store._client()
            client.set("secret", "x")
            client.bgrewriteaof()  # new append-only files, written by the store itself
            deadline = time.monotonic() + 10
            while any(
                client.info("persistence")[f"aof_rewrite_{state}"]
                for state in ("in_progress", "scheduled")
            ):
                assert time.monotonic() < deadline, "the rewrite did not finish"
                time.sleep(0.01)
            client.close()
            if directory.name == "data":
                assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
            paths = [p for p in directory.rglob("*") if not p.is_socket()]
            assert any(p.name.startswith("appendonly") for p in paths)
            for path in paths:
                mode = stat.S_IMODE(os.stat(path).st_mode)
                assert mode & 0o077 == 0, f"{path} is {oct(mode)}"
        finally:
            store.close()
