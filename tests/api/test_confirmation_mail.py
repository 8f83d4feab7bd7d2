"""Zaqar's ``external_confirmation_url``: with require_confirmation, a ``mailto:`` subscriber is
mailed a text from the configured template, linking to that page with the pre-signed request
that confirms the subscription in its query."""

from __future__ import annotations

import pathlib

import pytest
from aiosmtpd.smtp import Envelope

from tests.helpers.api import CLIENT_ID, PROJECT, Api, api_on
from tests.helpers.mail import PAGE, link_in, mail_number
from zaqar_delay.conf import NotificationSettings, SignedUrlSettings, load_settings


def confirm(api: Api, query: dict[str, str], confirmed: bool) -> int:
    """What the page does with its query: the pre-signed PUT, from the query alone."""
    headers = {
        "URL-Signature": query["Signature"],
        "URL-Methods": query["Methods"],
        "URL-Paths": query["Paths"],
        "URL-Expires": query["Expires"],
        "X-Project-ID": query["Project"],
        "Client-ID": CLIENT_ID,
    }
    return api.put(query["Paths"], json={"confirmed": confirmed}, headers=headers).status_code


def test_the_mail_links_to_the_page_with_the_signed_request(
    request: pytest.FixtureRequest, smtp_inbox: tuple[int, list[Envelope]]
) -> None:
    port, received = smtp_inbox
    notification = NotificationSettings(
        require_confirmation=True,
        smtp_host="127.0.0.1",
        smtp_port=port,
        external_confirmation_url=PAGE,
    )
    settings = {"notification": notification, "signed_url": SignedUrlSettings("s" * 32)}
    for api in api_on(request, "embedded", **settings):
        created = api.post("/v2/queues/q/subscriptions", json={"subscriber": "mailto:o@ex.com"})
        assert created.status_code == 201, created.text
        sid = created.json["subscription_id"]
        mail = mail_number(received, 1)
        assert mail["Subject"] == "Zaqar Notification - Subscription Confirmation"
        assert mail["From"] == "Zaqar Notifications <no-reply@openstack.org>"
        text = mail.get_content()
        assert text.startswith(
            f"You have chosen to subscribe to the queue: q. This queue belongs to project: "
            f"{PROJECT}. To confirm this subscription, click or visit this link below: "
        )
        page, query = link_in(text)
        assert page == "https://confirm.example.com/page"
        assert list(query) == [
            *("lang", "Signature", "Methods", "Paths", "Project", "Expires", "Url", "Queue")
        ]
        assert (query["lang"], query["Methods"], query["Url"], query["Queue"]) == (
            *("en", "PUT", "", "q"),
        )
        assert query["Paths"] == f"/v2/queues/q/subscriptions/{sid}/confirm"
        assert api.get(f"/v2/queues/q/subscriptions/{sid}").json["confirmed"] is False
        assert confirm(api, query, True) == 204
        assert api.get(f"/v2/queues/q/subscriptions/{sid}").json["confirmed"] is True
        # Unconfirmed: the second template, whose link confirms it again.
        assert confirm(api, query, False) == 204
        notice = mail_number(received, 2)
        assert notice["Subject"] == "Zaqar Notification - Unsubscribe Confirmation"
        assert notice.get_content().startswith("You have unsubscribed successfully to the queue")
        _, again = link_in(notice.get_content())
        assert confirm(api, again, True) == 204
        assert api.get(f"/v2/queues/q/subscriptions/{sid}").json["confirmed"] is True


@pytest.mark.parametrize(
    ("template", "refusal"),
    [
        ("topic:T,sender:s@ex.com", "needs body"),
        ("topic:T,body:{0} {3},sender:s@ex.com", "may use {0}"),
        ("topic:T,body:{queue},sender:s@ex.com", "may use {0}"),
    ],
)
def test_a_template_it_cannot_write_is_refused_at_start(
    tmp_path: pathlib.Path, template: str, refusal: str
) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text(f"[notification]\nsubscription_confirmation_email_template = {template}\n")
    with pytest.raises(ValueError, match=refusal):
        load_settings([str(conf)], environ={})


def test_a_configured_template_is_used(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text(
        "[notification]\n"
        "unsubscribe_confirmation_email_template = topic:Bye,body:{1}/{0} {2},sender:a@ex.com\n"
    )
    template = load_settings([str(conf)], environ={}).notification
    written = template.unsubscribe_confirmation_email_template
    assert (written.topic, written.sender) == ("Bye", "a@ex.com")
    assert written.text("q", "p", "https://x") == "p/q https://x"
