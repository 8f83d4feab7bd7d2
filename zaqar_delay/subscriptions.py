"""The subscription use cases of the v2 API (Zaqar's rules and wording), independent of HTTP.

A subscription names who is pushed a queue's messages: an ``http(s)://`` endpoint, a
``trust+http(s)://`` one (pushed with a token of the subscribing user, through a Keystone
trust: ``push/trusts.py``) or a ``mailto:`` address, for ``ttl`` seconds, with ``options``
(Zaqar's ``post_data``, ``post_headers`` and ``_retry_policy``; zaqar-delay's dispatch
limits, ``dispatch_limits``). Subscriptions are unique by project, queue and subscriber.
"""

from __future__ import annotations

import dataclasses
import datetime
import secrets
from typing import Any

from zaqar_delay import errors, jsondoc, retry_policy, validation
from zaqar_delay.clock import Clock
from zaqar_delay.conf import Limits
from zaqar_delay.dispatch_limits import check as limits_check
from zaqar_delay.keystone.trusts import Trusts
from zaqar_delay.models import NewSubscription, Subscription, SubscriptionChange
from zaqar_delay.push import headers as post_headers
from zaqar_delay.push import subscribers
from zaqar_delay.push.confirmation import Confirmations
from zaqar_delay.push.guard import AddressGuard, DeniedAddress
from zaqar_delay.push.mail import MailRefused, MailRules
from zaqar_delay.push.trusts import SERVICE_OPTIONS, TRUST_ID, TRUSTOR_ID, Caller, is_trust
from zaqar_delay.quotas import Quotas
from zaqar_delay.storage.base import Driver
from zaqar_delay.stores import Stores

MIN_SUBSCRIPTION_TTL = 60
DUPLICATE = (
    "Such subscription already exists.Subscriptions are unique by project + queue + subscriber URI."
)


def _subscriber(value: Any, limits: Limits, guard: AddressGuard | None = None) -> str:
    types = list(limits.subscriber_types)
    if not isinstance(value, str) or not value:
        raise errors.InvalidRequest(
            f"The subscriber type of subscription must be supported in the list {types}."
        )
    try:
        parsed = subscribers.parse(value)
    except ValueError as exc:
        raise errors.InvalidRequest(str(exc)) from exc
    if parsed.scheme not in types:
        raise errors.InvalidRequest(
            f"The subscriber type of subscription must be supported in the list {types}."
        )
    if parsed.scheme == "mailto" and "@" not in parsed.path:
        raise errors.InvalidRequest("A mailto: subscriber needs an e-mail address.")
    if parsed.scheme != "mailto" and not parsed.hostname:
        raise errors.InvalidRequest(f"The subscriber {subscribers.redacted(value)} names no host.")
    if guard is not None and parsed.hostname:
        try:
            guard.check_host(parsed.hostname)
        except DeniedAddress as exc:
            raise errors.InvalidRequest(f"The subscriber is refused: {exc}.") from exc
    return value


def subscription_change(
    document: Any,
    limits: Limits,
    guard: AddressGuard | None = None,
    mail: MailRules | None = None,
    subscription_id: str = "",
) -> SubscriptionChange:
    """A POST or PATCH body (Zaqar's ``subscription_patching``) as typed fields, for the
    subscription ``subscription_id`` ("" for a new one). ``mail`` decides which senders
    ``options.from`` may name (None: none but the default)."""
    if not document:
        raise errors.InvalidRequest("No subscription to create.")
    if not isinstance(document, dict):
        raise errors.InvalidRequest("Subscriptions must be a dict.")
    subscriber = document.get("subscriber")
    options = document.get("options")
    _check_options(options, limits)
    ttl = document.get("ttl")
    if ttl:
        _check_ttl(ttl)
    checked = _subscriber(subscriber, limits, guard) if subscriber else None
    try:
        (mail or MailRules("")).check(checked, options if isinstance(options, dict) else None)
    except MailRefused as exc:
        raise errors.InvalidRequest(str(exc)) from exc
    return SubscriptionChange(
        subscription_id,
        subscriber=checked,
        ttl_s=int(ttl) if ttl else None,
        options=dict(options) if isinstance(options, dict) else None,
    )


def _check_options(options: Any, limits: Limits) -> None:
    """A subscription's options: a dict of Unicode text without the service's own, whose
    retry policy, dispatch limits and post headers are valid.

    A lone surrogate (a ``"\\ud800"`` escape) is refused anywhere in them: a push sends a
    ``post_data`` template and a mail ``subject`` as UTF-8, which cannot carry one: accepted,
    every push of the subscription would fail for good."""
    if options and not isinstance(options, dict):
        raise errors.InvalidRequest("Options must be a dict.")
    if isinstance(options, dict):
        for name in SERVICE_OPTIONS:
            if name in options:
                raise errors.InvalidRequest(f"The option {name} is set by the service only.")
    retry_policy.check(options, limits.max_message_ttl)
    limits_check(options)
    post_headers.check(options)
    if isinstance(options, dict) and not jsondoc.is_unicode(options):
        raise errors.InvalidRequest("Options must be Unicode text: no lone surrogate.")


def _check_ttl(ttl: Any) -> None:
    """A subscription's ttl: an integer of at least ``MIN_SUBSCRIPTION_TTL`` seconds whose
    expiry in ms fits a signed 64-bit integer."""
    if not validation.is_int(ttl):
        raise errors.InvalidRequest("TTL must be an integer.")
    if ttl < MIN_SUBSCRIPTION_TTL:
        raise errors.InvalidRequest(
            f"The TTL for a subscription must be at least {MIN_SUBSCRIPTION_TTL} seconds long."
        )
    if ttl > validation.INT64_MAX // 1000:
        raise errors.InvalidRequest("The TTL for a subscription is too large.")


class Subscriptions:
    """Create, list, read, change, confirm and delete the subscriptions of every project."""

    def __init__(
        self,
        stores: Stores,
        limits: Limits,
        clock: Clock,
        guard: AddressGuard | None = None,
        confirmations: Confirmations | None = None,
        mail: MailRules | None = None,
        trusts: Trusts | None = None,
    ) -> None:
        """``stores`` says which store holds a queue's subscriptions; ``guard`` refuses
        subscribers whose address pushes may not reach; ``mail`` the senders a mail
        subscription may name; with ``confirmations`` (``require_confirmation``),
        unconfirmed subscriptions are sent a confirmation request when subscribed; with
        ``trusts`` (keystone and ``[trustee]``), a ``trust+`` subscriber gets a trust."""
        self.trusts = trusts
        self.stores = stores
        self.quotas = Quotas(stores, limits)
        self.limits = limits
        self.clock = clock
        self.guard = guard
        self.confirmations = confirmations
        self.mail = mail

    def _store(self, project: str, queue: str) -> Driver:
        return self.stores.for_queue(project, queue)

    def create(
        self,
        project: str,
        queue: str,
        document: Any,
        caller: Caller | None = None,
        session: str | None = None,
        session_secret: str | None = None,
    ) -> tuple[str, str | None]:
        """Subscribe; ``(id, signing secret)``, the secret only when the subscription is new.

        A live subscription with the same subscriber is a Conflict once it is confirmed;
        before that it is answered again (``(its id, None)``): Zaqar's rule, so that
        subscribing again re-sends the confirmation request. A ``trust+`` subscriber of a
        ``caller`` gets a trust from them (deleted again if no subscription keeps it).
        ``session``: the subscriber of the WebSocket session asking, which a document
        without ``subscriber`` subscribes (the server's own, so not held to the rules of
        subscribers a client names), whose pushes are signed with ``session_secret``: the
        session's key, which its relay checks."""
        own = session if isinstance(document, dict) and not document.get("subscriber") else None
        if own is not None:
            document = {**document, "subscriber": ""}
        elif isinstance(document, dict) and "subscriber" not in document:
            raise errors.InvalidRequest("Missing parameter subscriber in body.")
        change = subscription_change(document, self.limits, self.guard, self.mail)
        # An empty one is refused here (a PATCH takes an empty subscriber as "keep it");
        # one the change holds was checked already, its host resolved once.
        subscriber = (
            own or change.subscriber or _subscriber(document["subscriber"], self.limits, self.guard)
        )
        now_ms = self.clock.now_ms()
        # Subscribing creates the queue when it does not exist.
        self.quotas.check_new_queue(project, queue)
        self.quotas.check_new_subscription(project, queue, subscriber, now_ms)
        secret = (own is not None and session_secret) or secrets.token_urlsafe(32)
        ttl_s = change.ttl_s or self.limits.default_subscription_ttl
        options = dict(change.options or {})
        trust_id = None
        if is_trust(subscriber) and self.trusts is not None:
            if caller is None:  # a pre-signed request, which carries no token
                raise errors.InvalidRequest("A trust+ subscriber needs a Keystone token.")
            trust_id = self._new_trust(caller, project, now_ms + ttl_s * 1000)
            options.update({TRUST_ID: trust_id, TRUSTOR_ID: caller.user_id})
        try:
            # Subscribing creates the queue when it does not exist: place it first.
            subscription_id, created = self.stores.place(project, queue).create_subscription(
                project, queue, NewSubscription(subscriber, ttl_s, options, secret), now_ms
            )
        except BaseException:
            self._forget_trust(caller, trust_id)
            raise
        if not created:
            self._forget_trust(caller, trust_id)  # the subscription there keeps its own
        if own is not None and self.confirmations is not None:
            # A session subscribing itself asks for its own pushes: there is nobody to
            # confirm, and no confirmation request could reach it.
            if created:
                self._store(project, queue).confirm_subscription(
                    project, queue, subscription_id, True, now_ms
                )
        elif not created or self.confirmations is not None:
            self._check_duplicate_or_request(project, queue, subscription_id, created, now_ms)
        return subscription_id, secret if created else None

    def _check_duplicate_or_request(
        self, project: str, queue: str, subscription_id: str, created: bool, now_ms: int
    ) -> None:
        """A subscriber subscribed again: Conflict once it is confirmed. One not confirmed
        (new, or subscribed again) is sent its confirmation request, if confirmations are
        asked for."""
        existing = self._store(project, queue).get_subscription(
            project, queue, subscription_id, now_ms
        )
        if existing is None or (existing.confirmed and not created):
            raise errors.Conflict(DUPLICATE)
        if self.confirmations is not None and not existing.confirmed:
            self.confirmations.request(project, queue, existing)

    def list(self, project: str, queue: str, marker: str | None, limit: int) -> list[Subscription]:
        if not 1 <= limit <= self.limits.max_subscriptions_per_page:
            raise errors.InvalidRequest(
                "Limit must be at least 1 and may not be greater than "
                f"{self.limits.max_subscriptions_per_page}."
            )
        return self._store(project, queue).list_subscriptions(
            project, queue, marker, limit, self.clock.now_ms()
        )

    def get(self, project: str, queue: str, subscription_id: str) -> Subscription:
        found = self._store(project, queue).get_subscription(
            project, queue, subscription_id, self.clock.now_ms()
        )
        if found is None:
            raise errors.SubscriptionDoesNotExist(subscription_id, queue, project)
        return found

    def _new_trust(self, caller: Caller, project: str, expires_ms: int) -> str:
        assert self.trusts is not None
        expires = datetime.datetime.fromtimestamp(expires_ms / 1000, datetime.UTC)
        return self.trusts.create(caller, project, expires)

    def _forget_trust(self, caller: Caller | None, trust_id: str | None) -> None:
        if trust_id is not None and self.trusts is not None and caller is not None:
            self.trusts.delete(caller, trust_id)

    def _trust_held(self, subscription: Subscription, caller: Caller | None) -> str | None:
        """The id of the trust ``subscription`` pushes with, once ``caller`` is shown to be its
        trustor; None when it holds none. Forbidden for anyone else, and for a pre-signed
        request (no token): the trust sends the trustor's token to the subscriber, so only
        the trustor may redirect it, change it or delete it."""
        trust_id = subscription.options.get(TRUST_ID)
        if self.trusts is None or not isinstance(trust_id, str):
            return None  # no trust: its pushes carry no token
        if caller is None:
            raise errors.Forbidden(
                "A trust+ subscription is changed or deleted only with its trustor's Keystone "
                "token, never through a pre-signed URL."
            )
        trustor = subscription.options.get(TRUSTOR_ID)
        if not isinstance(trustor, str):
            # Subscribed before the trustor was recorded: Keystone knows.
            trustor = self.trusts.trustor_of(caller, trust_id)
        if trustor != caller.user_id:
            raise errors.Forbidden(
                "A trust+ subscription is changed or deleted only by the user who subscribed "
                "it (its trustor)."
            )
        return trust_id

    def update(
        self,
        project: str,
        queue: str,
        subscription_id: str,
        document: Any,
        caller: Caller | None = None,
    ) -> None:
        """Change a subscription. A ``trust+`` subscriber stays one: changing between kinds
        means subscribing again. A subscription holding a trust is changed by its trustor
        only; a new subscriber gets a new trust, and the old one is deleted."""
        change = subscription_change(document, self.limits, self.guard, self.mail, subscription_id)
        now_ms = self.clock.now_ms()
        current, trust_id = None, None
        # Read only when there is a trust or a subscriber's kind to check.
        if self.trusts is not None or change.subscriber is not None:
            current = self.get(project, queue, subscription_id)
            trust_id = self._trust_held(current, caller)
        if (
            current is not None
            and change.subscriber is not None
            and is_trust(change.subscriber) != is_trust(current.subscriber)
        ):
            raise errors.InvalidRequest(
                "A trust+ subscriber cannot become another kind, nor another kind a "
                "trust+ one: delete the subscription and subscribe again."
            )
        if trust_id is None:
            self._store(project, queue).update_subscription(project, queue, change, now_ms)
            return
        assert caller is not None and current is not None  # _trust_held saw both
        kept = {name: current.options[name] for name in SERVICE_OPTIONS if name in current.options}
        renewed = None
        if change.subscriber is not None and change.subscriber != current.subscriber:
            expires_ms = now_ms + change.ttl_s * 1000 if change.ttl_s else current.expires_ms
            renewed = self._new_trust(caller, project, expires_ms)
            kept = {TRUST_ID: renewed, TRUSTOR_ID: caller.user_id}
        if change.options is not None or renewed is not None:
            given = current.options if change.options is None else change.options
            change = dataclasses.replace(change, options={**given, **kept})
        try:
            self._store(project, queue).update_subscription(project, queue, change, now_ms)
        except BaseException:
            self._forget_trust(caller, renewed)
            raise
        if renewed is not None:
            self._forget_trust(caller, trust_id)

    def confirm(self, project: str, queue: str, subscription_id: str, document: Any) -> None:
        confirmed = document.get("confirmed") if isinstance(document, dict) else None
        if not isinstance(confirmed, bool):
            raise errors.InvalidRequest("The 'confirmed' should be boolean.")
        now_ms = self.clock.now_ms()
        self._store(project, queue).confirm_subscription(
            project, queue, subscription_id, confirmed, now_ms
        )
        if self.confirmations is not None and not confirmed:
            # Zaqar tells the subscriber, with the URL that confirms it again.
            subscription = self._store(project, queue).get_subscription(
                project, queue, subscription_id, now_ms
            )
            if subscription is not None:
                self.confirmations.request(project, queue, subscription, unsubscribed=True)

    def delete(
        self, project: str, queue: str, subscription_id: str, caller: Caller | None = None
    ) -> None:
        """Delete a subscription, its trust first: by its trustor only (Forbidden for anyone
        else); if Keystone cannot delete the trust, 503 and the subscription stays."""
        store = self._store(project, queue)
        current = store.get_subscription(project, queue, subscription_id, self.clock.now_ms())
        trust_id = self._trust_held(current, caller) if current is not None else None
        self._forget_trust(caller, trust_id)
        store.delete_subscription(project, queue, subscription_id)
