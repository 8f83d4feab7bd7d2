"""The WSGI application factory; nothing here runs at import time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import falcon

from zaqar_delay import jsondoc
from zaqar_delay.admission import Admission
from zaqar_delay.api import body, home, openapi
from zaqar_delay.api import errors as api_errors
from zaqar_delay.api.auth import WSGIApp, protect
from zaqar_delay.api.authorization import keystone_authorizer
from zaqar_delay.api.middleware import RequestContext, RequestTimer
from zaqar_delay.api.oslo_stack import with_oslo_middleware
from zaqar_delay.api.routes import ROUTES
from zaqar_delay.api.turns import with_turns
from zaqar_delay.api.v2 import pools, queues, subscriptions, versions
from zaqar_delay.api.v2.base import Resource
from zaqar_delay.api.websocket.project_sessions import ProjectSessions
from zaqar_delay.api.websocket.relay import SessionRelay
from zaqar_delay.api.websocket.route import FRAME_OVERHEAD, SessionRules, with_websocket
from zaqar_delay.clock import Clock, SystemClock
from zaqar_delay.conf import Settings, conf_of
from zaqar_delay.dashboard import with_dashboard
from zaqar_delay.encryption import MessageCipher
from zaqar_delay.journal import open_journal
from zaqar_delay.keystone.catalog import PublicEndpoints
from zaqar_delay.keystone.trusts import Trusts, trusts_of
from zaqar_delay.metrics import Metrics
from zaqar_delay.pooling.setup import pooled_stores, registry
from zaqar_delay.push.confirmation import Confirmations, PublicUrls, confirmation_page
from zaqar_delay.push.dispatcher import Dispatcher
from zaqar_delay.push.guard import AddressGuard, tenant_guard
from zaqar_delay.push.mail import MailRules, MailSender
from zaqar_delay.push.senders import Senders
from zaqar_delay.push.webhook import WebhookSender
from zaqar_delay.service import Service
from zaqar_delay.signed_urls import Signer
from zaqar_delay.storage.base import Driver
from zaqar_delay.storage.catalog import PoolRecord
from zaqar_delay.storage.uri import open_driver
from zaqar_delay.stores import PooledStores, Stores
from zaqar_delay.subscriptions import Subscriptions


def create_wsgi_app(
    settings: Settings, driver: Driver | None = None, clock: Clock | None = None
) -> WSGIApp:
    """:func:`create_app` behind the configured authentication, with the dashboard's static
    page beside it, inside oslo.middleware (``oslo_stack.py``): what servers run; and, with
    ``[notification] push``, this process's push dispatcher."""
    clock = clock or SystemClock()
    app, service = build(settings, driver, clock)
    if settings.notification.push:
        start_dispatcher(service, settings)
    turns = Admission(settings.server.max_active_requests, service.metrics.observe_turn_wait)
    api = protect(with_turns(app, turns, largest_body(settings)), settings, clock)
    http = with_oslo_middleware(with_dashboard(api), settings)
    # In front of oslo.middleware, whose webob layers would buffer a session's bytes; a
    # frame's room is a post's plus that of the frame's other fields.
    rules = SessionRules(
        keystone=settings.server.auth_strategy == "keystone",
        max_message=settings.limits.max_messages_post_size + FRAME_OVERHEAD,
        max_sessions=settings.websocket.max_sessions,
        ping_interval=settings.websocket.ping_interval,
        external_port=settings.websocket.external_port,
        projects=ProjectSessions(settings.websocket.max_sessions_per_project),
        clock=clock,
        relay=SessionRelay(
            settings.websocket.notification_bind, settings.limits.max_messages_post_size, clock
        ),
    )
    return with_websocket(http, api, rules)


def largest_body(settings: Settings) -> int:
    """The largest request body any route takes, in bytes."""
    limits = settings.limits
    return max(limits.max_messages_post_size, limits.max_queue_metadata, body.DEFAULT_MAX_BODY)


def start_dispatcher(service: Service, settings: Settings) -> Dispatcher:
    """Run a dispatcher on the service's store, woken by the posts this process serves."""
    guard = push_guard(settings)
    sender = Senders(
        *push_senders(settings, guard, push_trusts(settings)), fire=service.schedules.fire_many
    )
    dispatcher = Dispatcher(
        service,
        sender,
        settings.notification.push_concurrency,
        require_confirmation=settings.notification.require_confirmation,
    )
    service.lifecycle.pushes_owed = dispatcher.notify
    dispatcher.start()
    return dispatcher


def push_guard(settings: Settings) -> AddressGuard:
    """Where this service's pushes may connect: under keystone, any tenant subscribes, so
    the operator's own networks are denied by default too."""
    return tenant_guard(
        settings.notification.denied_networks,
        settings.notification.allowed_networks,
        strangers=settings.server.auth_strategy == "keystone",
    )


def push_trusts(settings: Settings) -> Trusts | None:
    """Keystone trusts for ``trust+`` subscribers: under keystone, with ``[trustee]``."""
    if settings.server.auth_strategy != "keystone":
        return None
    return trusts_of(conf_of(settings))


def confirmation_urls(settings: Settings) -> PublicUrls | None:
    """Under keystone, the URLs of a confirmation request at the public endpoints of Zaqar's
    services in Keystone's catalog, as Zaqar names them."""
    if settings.server.auth_strategy != "keystone":
        return None
    return PublicEndpoints(conf_of(settings)).urls


def push_senders(
    settings: Settings, guard: AddressGuard, trusts: Trusts | None = None
) -> tuple[WebhookSender, MailSender]:
    """The webhook and mail senders of ``[notification]``; ``trusts`` give the tokens of
    pushes to ``trust+`` subscribers."""
    webhook = WebhookSender(
        guard,
        settings.notification.push_timeout,
        settings.notification.push_concurrency,
        trusts,
        # A template holding the message once always fits: the largest post, and the largest
        # subscription document.
        max_body_bytes=settings.limits.max_messages_post_size + body.DEFAULT_MAX_BODY,
    )
    mail = MailSender(
        settings.notification.smtp_host,
        settings.notification.smtp_port,
        settings.notification.smtp_sender,
        settings.notification.push_timeout,
        settings.notification.smtp_starttls,
        settings.notification.smtp_username,
        settings.notification.smtp_password,
        settings.notification.smtp_allowed_senders,
    )
    return webhook, mail


def message_cipher(settings: Settings) -> MessageCipher | None:
    """The cipher of encrypted queues, if a key is configured (or the embedded store's)."""
    if not settings.encryption.key:
        return None
    return MessageCipher(settings.encryption.key, settings.encryption.old_keys)


def create_app(
    settings: Settings, driver: Driver | None = None, clock: Clock | None = None
) -> falcon.App[falcon.Request, falcon.Response]:
    """Build the v2 API on ``driver`` (opened from ``settings.storage.uri`` when omitted)."""
    return build(settings, driver, clock)[0]


def build(
    settings: Settings,
    driver: Driver | None = None,
    clock: Clock | None = None,
    open_pool_driver: Callable[[PoolRecord], Driver] | None = None,
) -> tuple[falcon.App[falcon.Request, falcon.Response], Service]:
    """:func:`create_app`, and the service it serves. ``open_pool_driver`` opens the driver
    of a registered pool (by default from its URI and options, ``pooling.setup``)."""
    if driver is None:
        driver = open_driver(settings.storage.uri, settings)
    clock = clock or SystemClock()
    stores = (
        pooled_stores(settings, driver, open_pool_driver) if settings.pooling else Stores(driver)
    )
    service = Service(
        driver,
        settings.limits,
        clock,
        metrics=Metrics(stores, clock, settings.metrics.max_queue_series),
        journal=open_journal(
            settings.journal.path, settings.journal.max_bytes, settings.journal.max_total
        ),
        cipher=message_cipher(settings),
        stores=stores,
    )
    signer = Signer(settings.signed_url.secret_key, clock)
    # keystone replaces the project header with the token's; a default would bypass that.
    default_project = (
        settings.server.default_project if settings.server.auth_strategy == "noauth" else ""
    )
    # Zaqar's admin_mode: the pools and flavors API for any noauth caller.
    open_admin_api = settings.server.auth_strategy == "noauth" and settings.admin_mode
    middleware: list[Any] = [
        RequestTimer(service.metrics),
        RequestContext(
            service,
            signer,
            default_project,
            open_admin_api,
            keystone_authorizer(settings) if settings.server.auth_strategy == "keystone" else None,
        ),
    ]
    app = falcon.App(middleware=middleware)
    # Responses in the form bodies are stored in: compact, ASCII (a lone surrogate in a body
    # stays an escape; falcon's default would fail to encode it).
    responses = falcon.media.JSONHandler(dumps=jsondoc.dumps)
    app.resp_options.media_handlers[falcon.MEDIA_JSON] = responses
    app.req_options.keep_blank_qs_values = False
    app.req_options.strip_url_path_trailing_slash = False
    api_errors.register(app)

    guard = push_guard(settings)
    confirmations = None
    if settings.notification.require_confirmation:
        webhook, mail = push_senders(settings, guard)
        page = confirmation_page(settings.notification)
        urls = confirmation_urls(settings)
        confirmations = Confirmations(signer, clock, webhook, mail, page, urls)
    mail_rules = MailRules(
        settings.notification.smtp_sender, settings.notification.smtp_allowed_senders
    )
    subscribing = Subscriptions(
        service.stores,
        settings.limits,
        clock,
        guard,
        confirmations,
        mail_rules,
        push_trusts(settings),
    )
    # The resources that need more than the service.
    special: dict[type[Resource], Resource] = {
        **{
            kind: kind(service, subscribing)
            for kind in (
                subscriptions.SubscriptionCollection,
                subscriptions.SubscriptionItem,
                subscriptions.SubscriptionConfirm,
            )
        },
        # Its labels name projects and queues: with keystone, for admin tokens only.
        queues.QueueShare: queues.QueueShare(service, signer),
        # Documents made from the route table, which names these resources too.
        versions.Home: versions.Home(service, home.dumps()),
        versions.OpenAPIDocument: versions.OpenAPIDocument(service, openapi.dumps(settings.limits)),
    }
    # The admin API of pooling: under keystone for the admin role, under noauth with admin_mode.
    pooled = isinstance(stores, PooledStores)
    serve_catalog = pooled and (settings.server.auth_strategy == "keystone" or open_admin_api)
    if isinstance(stores, PooledStores):
        catalog = registry(settings, stores, open_pool_driver)
        for kind in pools.CATALOG_RESOURCES:
            special[kind] = kind(service, catalog)
    for route in ROUTES:
        if route.pooling and not serve_catalog:
            continue
        app.add_route(route.template, special.get(route.resource) or route.resource(service))
    return app, service
