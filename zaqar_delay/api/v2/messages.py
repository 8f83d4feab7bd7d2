"""Messages: post, list, bulk get, bulk delete, pop, and one message's get, edit and delete."""

from __future__ import annotations

import re
import urllib.parse

import falcon

from zaqar_delay import errors, push_hops
from zaqar_delay.api import body, params, schemas, views
from zaqar_delay.api.operations import HomeLink, operation
from zaqar_delay.api.schemas import FLAG, ok, query
from zaqar_delay.api.v2.base import Resource
from zaqar_delay.posting import PushOrigin
from zaqar_delay.push.webhook import DELIVERY_ID_HEADER

# The longest delivery id header a post takes as a push's (a longer one is no push's of this
# service): its dedup ids must stay within validation.DEDUP_ID_MAX.
MAX_DELIVERY_ID = 200
DELIVERY_ID = re.compile(rf"[\x21-\x7e]{{1,{MAX_DELIVERY_ID}}}")


def push_origin(req: falcon.Request) -> PushOrigin:
    """The push of this service a post says it comes from: its delivery id
    (``X-Zaqar-Delay-Delivery-Id``, "" when the post carries none it could be) and its hops
    (``X-Zaqar-Delay-Hops``; InvalidRequest when not a whole number)."""
    value = req.get_header(DELIVERY_ID_HEADER) or ""
    delivery_id = value if DELIVERY_ID.fullmatch(value) else ""
    return PushOrigin(delivery_id, push_hops.of_header(req.get_header(push_hops.HEADER)))


class MessageCollection(Resource):
    @operation(
        "Post messages",
        {
            **ok("201", "the message hrefs, and which were duplicates", schemas.POSTED),
            **schemas.errors("403"),
        },
        body={
            "type": "object",
            "required": ["messages"],
            "properties": {"messages": {"type": "array", "items": schemas.MESSAGE_IN}},
        },
        home=HomeLink("rel/post_messages", accept_post=True),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        limit = self.service.limits.max_messages_post_size
        payload = body.read(req, limit, f"Message collection size is too large. Max size {limit}")
        posted = self.service.post_messages(
            req.context.project, queue_name, payload, req.context.client_id, push_origin(req)
        )
        hrefs = [views.message_href(queue_name, i) for i in posted.ids]
        resp.status = falcon.HTTP_201
        # Zaqar's Location names every id; past a page of ids (what a GET of ?ids= takes) it
        # names the queue's messages instead, so the header stays short for proxies.
        if len(posted.ids) <= self.service.limits.max_messages_per_page:
            resp.location = f"{views.queue_href(queue_name)}/messages?ids={','.join(posted.ids)}"
        else:
            resp.location = f"{views.queue_href(queue_name)}/messages"
        # "duplicates" (an extension): the hrefs of messages a remembered dedup_id matched.
        resp.media = {"resources": hrefs, "duplicates": [hrefs[i] for i in posted.duplicates]}

    @operation(
        "List or bulk-get messages (404: none of the ids exists)",
        {
            **ok("200", "messages", schemas.MESSAGES_OUT),
            **ok("204", "none"),
            **schemas.errors("404"),
        },
        query=[
            query("ids", {"type": "string"}),
            query("marker", {"type": "string"}),
            query("limit", {"type": "integer"}),
            query("echo", FLAG),
            query("include_claimed", FLAG),
            query("include_delayed", FLAG),
            query("sort", {"type": "string", "enum": ["posted", "due"]}),
            query("with_schedule", FLAG),
        ],
        home=HomeLink(
            "rel/messages",
            (
                ("marker", "marker"),
                ("limit", "size"),
                ("echo", "echo"),
                ("include_claimed", "include_claimed"),
                ("include_delayed", "include_delayed"),
            ),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        ids = params.id_list(req, "ids")
        if ids is not None:
            self._get_by_ids(req, resp, queue_name, ids)
            return
        limit = params.integer(req, "limit", 10)
        assert limit is not None
        options = {
            "echo": params.boolean(req, "echo"),
            "include_claimed": params.boolean(req, "include_claimed"),
            "include_delayed": params.boolean(req, "include_delayed"),
        }
        by_due = params.sort_by_due(req)
        schedule = params.schedule(req)
        page = self.service.list_messages(
            req.context.project,
            queue_name,
            client_id=req.context.client_id,
            marker=params.text(req, "marker"),
            limit=limit,
            sort_by_due=by_due,
            **options,
        )
        now_ms = self.service.now_ms()
        links = []
        if page.next_marker is not None:
            query: dict[str, object] = {"limit": limit}
            query.update({name: str(value).lower() for name, value in options.items()})
            if by_due:
                query["sort"] = "due"
            if schedule:
                query["with_schedule"] = "true"
            query["marker"] = page.next_marker
            href = f"{views.queue_href(queue_name)}/messages?{urllib.parse.urlencode(query)}"
            links.append({"rel": "next", "href": href})
        resp.media = {
            "messages": [
                views.message(queue_name, m, now_ms, schedule, self.with_checksum)
                for m in page.messages
            ],
            "links": links,
        }

    def _get_by_ids(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, ids: list[str]
    ) -> None:
        found = self.service.get_messages(req.context.project, queue_name, ids)
        now_ms = self.service.now_ms()
        schedule = params.schedule(req)
        resp.media = {
            "messages": [
                views.message(queue_name, m, now_ms, schedule, self.with_checksum) for m in found
            ]
        }

    @operation(
        "Bulk delete or pop",
        {
            **ok("200", "popped", schemas.MESSAGES_OUT),
            **ok("204", "deleted"),
            **schemas.errors("403"),
        },
        query=[
            query("ids", {"type": "string"}),
            query("claim_ids", {"type": "string"}),
            query("pop", {"type": "integer"}),
        ],
        home=HomeLink("rel/messages_delete", (("ids", "ids"), ("pop", "pop"))),
    )
    def on_delete(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        ids = params.id_list(req, "ids")
        pop = params.integer(req, "pop")
        if ids is not None and pop is not None:
            raise errors.InvalidRequest(
                "pop and id params cannot be present together in the delete request."
            )
        if pop is not None:
            popped = self.service.pop_messages(req.context.project, queue_name, pop)
            now_ms = self.service.now_ms()
            resp.media = {
                "messages": [views.popped_message(m, now_ms, self.with_checksum) for m in popped]
            }
            return
        if ids is None:
            raise errors.InvalidRequest(
                'The request should have either "ids" or "pop" parameter in the request, to be '
                "able to delete."
            )
        claim_ids = params.id_list(req, "claim_ids")
        self.service.delete_messages(req.context.project, queue_name, ids, claim_ids)
        resp.status = falcon.HTTP_204


class MessageItem(Resource):
    @operation(
        "Get a message",
        {**ok("200", "message", schemas.MESSAGE_OUT), **schemas.errors("404")},
        query=[query("with_schedule", FLAG)],
        home=HomeLink("rel/message_get"),
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, message_id: str
    ) -> None:
        message = self.service.get_message(req.context.project, queue_name, message_id)
        now_ms = self.service.now_ms()
        resp.media = views.message(
            queue_name, message, now_ms, params.schedule(req), self.with_checksum
        )

    @operation(
        "Edit or reschedule a message (extension)",
        {**ok("204", "edited"), **schemas.errors("403", "404")},
        query=[query("claim_id", schemas.HEX_ID)],
        body={
            "type": "object",
            "properties": {
                "body": schemas.JSON_VALUE,
                "ttl": {"type": "integer"},
                "delay": {"type": "integer"},
                "deliver_at": schemas.JSON_VALUE,
            },
            "additionalProperties": False,
        },
    )
    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, message_id: str
    ) -> None:
        """zaqar-delay extension: the auditor's edit of a message's body, ttl or due time; a
        new due time alone is a reschedule, or a "retry later" when the message is claimed."""
        limit = self.service.limits.max_messages_post_size
        payload = body.read(req, limit, f"Message edit size is too large. Max size {limit}")
        claim_id = params.text(req, "claim_id")
        self.service.edit_message(req.context.project, queue_name, message_id, claim_id, payload)
        resp.status = falcon.HTTP_204

    @operation(
        "Delete a message",
        {**ok("204", "deleted"), **schemas.errors("403")},
        query=[query("claim_id", schemas.HEX_ID)],
        home=HomeLink("rel/message_delete", (("claim", "claim_id"),)),
    )
    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, message_id: str
    ) -> None:
        claim_id = params.text(req, "claim_id")
        self.service.delete_message(req.context.project, queue_name, message_id, claim_id)
        resp.status = falcon.HTTP_204
