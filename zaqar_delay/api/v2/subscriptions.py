"""Subscriptions: create, list, get, update (PATCH), delete and confirm (Zaqar v2)."""

from __future__ import annotations

import functools
import urllib.parse

import falcon

from zaqar_delay.api import body, params, schemas, views
from zaqar_delay.api.operations import HomeLink, operation
from zaqar_delay.api.schemas import ok, query
from zaqar_delay.api.v2.base import Resource
from zaqar_delay.api.websocket.relay import SESSION_SUBSCRIBER_ENV, SessionSubscriber
from zaqar_delay.push.trusts import Caller
from zaqar_delay.service import Service
from zaqar_delay.subscriptions import Subscriptions


def caller_of(req: falcon.Request) -> Caller | None:
    """The user keystonemiddleware validated (it replaced the identity headers with the
    token's); None without a token, or for a pre-signed request, which skipped validation.
    Used only under keystone, where trusts are made."""
    token, user_id = req.get_header("X-Auth-Token"), req.get_header("X-User-Id")
    if not token or not user_id or req.get_header("URL-Signature") is not None:
        return None
    roles = tuple(r.strip() for r in (req.get_header("X-Roles") or "").split(",") if r.strip())
    return Caller(token, user_id, roles)


class SubscriptionResource(Resource):
    """A resource of the subscription use cases (``zaqar_delay.subscriptions``)."""

    def __init__(self, service: Service, subscriptions: Subscriptions) -> None:
        super().__init__(service)
        self.subscriptions = subscriptions


class SubscriptionCollection(SubscriptionResource):
    @operation(
        "List subscriptions",
        ok("200", "subscriptions", {"type": "object"}),
        query=[query("marker", {"type": "string"}), query("limit", {"type": "integer"})],
        home=HomeLink(
            "rel/subscriptions_get", (("marker", "marker"), ("limit", "subscription_limit"))
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        limit = params.integer(req, "limit", 10)
        assert limit is not None
        marker = params.text(req, "marker")
        found = self.subscriptions.list(req.context.project, queue_name, marker, limit)
        now_ms = self.service.now_ms()
        links = []
        if found:
            query_string = urllib.parse.urlencode({"marker": found[-1].id, "limit": limit})
            links.append({"rel": "next", "href": f"{req.path}?{query_string}"})
        resp.media = {
            "subscriptions": [views.subscription(s, now_ms) for s in found],
            "links": links,
        }

    @operation(
        "Subscribe (409: the subscriber is subscribed already; 403: a quota)",
        {**ok("201", "created", schemas.SUBSCRIPTION_ID), **schemas.errors("403", "409")},
        body=schemas.SUBSCRIPTION_IN,
        home=HomeLink("rel/subscriptions_post", accept_post=True),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        document = body.read_json(req)
        session: SessionSubscriber | None = req.env.get(SESSION_SUBSCRIBER_ENV)
        project = req.context.project
        subscription_id, secret = self.subscriptions.create(
            project,
            queue_name,
            {} if document is None else document,
            caller_of(req),
            session=None if session is None else session.address,
            session_secret=None if session is None else session.secret,
        )
        if session is not None:
            session.forgets[subscription_id] = functools.partial(
                self.subscriptions.delete, project, queue_name, subscription_id
            )
        resp.status = falcon.HTTP_201
        resp.location = req.path
        resp.media = {"subscription_id": subscription_id}
        if secret is not None:  # shown this once: it keys the signatures of its pushes
            resp.media["signing_secret"] = secret


class SubscriptionItem(SubscriptionResource):
    @operation(
        "Get a subscription",
        {**ok("200", "subscription", schemas.SUBSCRIPTION_OUT), **schemas.errors("404")},
        home=HomeLink("rel/subscription"),
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, subscription_id: str
    ) -> None:
        found = self.subscriptions.get(req.context.project, queue_name, subscription_id)
        resp.media = views.subscription(found, self.service.now_ms())

    @operation(
        "Update a subscription",
        {**ok("204", "updated"), **schemas.errors("403", "404", "409")},
        body=schemas.SUBSCRIPTION_IN,
        home=HomeLink("rel/subscription_patch"),
    )
    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, subscription_id: str
    ) -> None:
        document = body.read_json(req)
        self.subscriptions.update(
            req.context.project, queue_name, subscription_id, document, caller_of(req)
        )
        resp.status = falcon.HTTP_204
        resp.location = req.path

    @operation(
        "Delete a subscription",
        {**ok("204", "deleted"), **schemas.errors("403")},
        home=HomeLink("rel/subscription"),
    )
    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, subscription_id: str
    ) -> None:
        self.subscriptions.delete(req.context.project, queue_name, subscription_id, caller_of(req))
        resp.status = falcon.HTTP_204


class SubscriptionConfirm(SubscriptionResource):
    @operation(
        "Confirm or unconfirm a subscription",
        {**ok("204", "done"), **schemas.errors("404")},
        body={"type": "object", "properties": {"confirmed": {"type": "boolean"}}},
    )
    def on_put(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, subscription_id: str
    ) -> None:
        document = body.read_json(req)
        self.subscriptions.confirm(req.context.project, queue_name, subscription_id, document)
        resp.status = falcon.HTTP_204
        resp.location = req.path
