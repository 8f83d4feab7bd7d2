"""Messages: post, list, bulk get, bulk delete, pop, and one message's get and delete."""

from __future__ import annotations

import urllib.parse

import falcon

from zaqar_delay import errors
from zaqar_delay.api import body, documents, params, views
from zaqar_delay.api.v2.base import Resource


class MessageCollection(Resource):
    def on_post(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        limit = self.service.limits.max_messages_post_size
        payload = body.read(req, limit, f"Message collection size is too large. Max size {limit}")
        posted = self.service.post_messages(
            req.context.project, queue_name, payload, req.context.client_id
        )
        hrefs = [views.message_href(queue_name, i) for i in posted.ids]
        resp.status = falcon.HTTP_201
        resp.location = f"/v2/queues/{queue_name}/messages?ids={','.join(posted.ids)}"
        # "duplicates" (an extension): the hrefs of messages a remembered dedup_id matched.
        resp.media = {"resources": hrefs, "duplicates": [hrefs[i] for i in posted.duplicates]}

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
            href = f"/v2/queues/{queue_name}/messages?{urllib.parse.urlencode(query)}"
            links.append({"rel": "next", "href": href})
        resp.media = {
            "messages": [views.message(queue_name, m, now_ms, schedule) for m in page.messages],
            "links": links,
        }

    def _get_by_ids(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, ids: list[str]
    ) -> None:
        found = self.service.get_messages(req.context.project, queue_name, ids)
        now_ms = self.service.now_ms()
        schedule = params.schedule(req)
        resp.media = {"messages": [views.message(queue_name, m, now_ms, schedule) for m in found]}

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
            resp.media = {"messages": [views.popped_message(m, now_ms) for m in popped]}
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
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, message_id: str
    ) -> None:
        message = self.service.get_message(req.context.project, queue_name, message_id)
        now_ms = self.service.now_ms()
        resp.media = views.message(queue_name, message, now_ms, params.schedule(req))

    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, message_id: str
    ) -> None:
        """zaqar-delay extension: reschedule, or retry later when the message is claimed."""
        claim_id = params.text(req, "claim_id")
        change = documents.due_change(body.read_json(req))
        self.service.reschedule_message(
            req.context.project, queue_name, message_id, claim_id, change
        )
        resp.status = falcon.HTTP_204

    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, message_id: str
    ) -> None:
        claim_id = params.text(req, "claim_id")
        self.service.delete_message(req.context.project, queue_name, message_id, claim_id)
        resp.status = falcon.HTTP_204
