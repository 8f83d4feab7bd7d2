"""Claims: create (201 or 204), get, renew (PATCH) and release (DELETE)."""

from __future__ import annotations

import falcon

from zaqar_delay.api import body, documents, params, schemas, views
from zaqar_delay.api.operations import HomeLink, operation
from zaqar_delay.api.schemas import FLAG, LimitOf, ok, query
from zaqar_delay.api.v2.base import Resource


class ClaimCollection(Resource):
    @operation(
        "Claim messages",
        {
            **ok("201", "claimed", schemas.MESSAGES_OUT),
            **ok("204", "nothing to claim"),
            # A waiting claim past max_waiting_claims_per_project that finds nothing.
            **schemas.errors("429"),
        },
        query=[
            query("limit", {"type": "integer"}),
            query("wait", {"type": "integer", "minimum": 0, "maximum": LimitOf("max_claim_wait")}),
            query("with_schedule", FLAG),
        ],
        body=schemas.CLAIM_BODY,
        home=HomeLink("rel/post_claim", (("limit", "claim_limit"),), accept_post=True),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        limit = params.integer(req, "limit", 10)
        assert limit is not None
        wait_s = params.number(req, "wait", 0.0)
        times = documents.claim_times(body.read_json(req), self.service.limits)
        claim = self.service.create_claim(req.context.project, queue_name, times, limit, wait_s)
        if claim is None:
            resp.status = falcon.HTTP_204
            return
        now_ms = self.service.now_ms()
        resp.status = falcon.HTTP_201
        resp.location = views.claim_href(queue_name, claim.id)
        schedule = params.schedule(req)
        resp.media = {
            "messages": [
                views.message(queue_name, m, now_ms, schedule, self.with_checksum)
                for m in claim.messages
            ]
        }


class ClaimItem(Resource):
    @operation(
        "Get a claim",
        {**ok("200", "claim", {"type": "object"}), **schemas.errors("404")},
        home=HomeLink("rel/claim"),
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, claim_id: str
    ) -> None:
        claim = self.service.get_claim(req.context.project, queue_name, claim_id)
        now_ms = self.service.now_ms()
        schedule = params.schedule(req)
        resp.media = views.claim(queue_name, claim, now_ms, schedule, self.with_checksum)

    @operation(
        "Renew a claim",
        {**ok("204", "renewed"), **schemas.errors("404")},
        body=schemas.CLAIM_BODY,
        home=HomeLink("rel/patch_claim"),
    )
    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, claim_id: str
    ) -> None:
        document = body.read_json(req)
        if document is None:
            raise falcon.HTTPBadRequest(
                title="Invalid request body", description="Request body could not be parsed."
            )
        times = documents.claim_times(document, self.service.limits)
        self.service.renew_claim(req.context.project, queue_name, claim_id, times)
        resp.status = falcon.HTTP_204

    @operation("Release a claim", ok("204", "released"), home=HomeLink("rel/delete_claim"))
    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, claim_id: str
    ) -> None:
        self.service.release_claim(req.context.project, queue_name, claim_id)
        resp.status = falcon.HTTP_204
