"""Queues: list, create, metadata get/patch, delete, stats, purge and pre-signed URLs."""

from __future__ import annotations

import urllib.parse

import falcon

from zaqar_delay import jsondoc, topics
from zaqar_delay.api import body, documents, params, schemas, views
from zaqar_delay.api.operations import HomeLink, operation
from zaqar_delay.api.schemas import FLAG, METADATA, errors, ok, query
from zaqar_delay.api.v2.base import Resource
from zaqar_delay.queue_listing import ListFilter
from zaqar_delay.service import Service
from zaqar_delay.signed_urls import Signer

JSON_PATCH = "application/openstack-messaging-v2.0-json-patch"
LISTING_PARAMETERS = frozenset(("limit", "marker", "detailed", "with_count", "name"))


def _metadata_too_large(limit: int) -> str:
    return f"Queue metadata is too large. Max size: {limit}"


class QueueCollection(Resource):
    """The project's queues (``TopicCollection``: its topics)."""

    of_topics = False

    @operation(
        "List queues",
        ok("200", "queues", {"type": "object"}),
        query=[
            query("limit", {"type": "integer"}),
            query("marker", {"type": "string"}),
            query("detailed", FLAG),
            query("with_count", FLAG),
            query("name", {"type": "string"}),
        ],
        home=HomeLink(
            "rel/queues",
            (
                ("marker", "marker"),
                ("limit", "size"),
                ("detailed", "detailed"),
                ("with_count", "with_count"),
            ),
        ),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        limit = params.integer(req, "limit", 10)
        assert limit is not None
        marker = params.text(req, "marker")
        detailed = params.boolean(req, "detailed")
        with_count = params.boolean(req, "with_count")
        # As Zaqar's: ``name`` a part of the name, any other parameter a metadata value.
        others = params.others(req, LISTING_PARAMETERS)
        filters = ListFilter.of_query(params.text(req, "name"), others)
        project = req.context.project
        page = self.service.listing.page(project, marker, limit, detailed, self.of_topics, filters)
        collection = "topics" if self.of_topics else "queues"
        document: dict[str, object] = {collection: [views.queue_entry(q) for q in page.queues]}
        links = []
        if page.resume_after is not None:
            query: dict[str, object] = {
                "limit": limit,
                "marker": topics.public_name(page.resume_after),
            }
            if detailed:
                query["detailed"] = "true"
            if filters.name:
                query["name"] = filters.name
            query.update(others)
            href = f"/v2/{collection}?{urllib.parse.urlencode(query)}"
            links.append({"rel": "next", "href": href})
        document["links"] = links
        if with_count:
            count = self.service.listing.count(project, self.of_topics)
            if count:
                document["count"] = count
        resp.media = document


class TopicCollection(QueueCollection):
    """``GET /v2/topics``: the project's topics, paged as queues are."""

    of_topics = True


class QueueItem(Resource):
    @operation(
        "Create a queue (403: the project has max_queues_per_project queues)",
        {**ok("201", "created"), **ok("204", "existed"), **errors("403")},
        body=METADATA,
        home=HomeLink("rel/queue"),
    )
    def on_put(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        limit = self.service.limits.max_queue_metadata
        metadata = body.read_json(req, limit, _metadata_too_large(limit))
        created = self.service.create_queue(
            req.context.project, queue_name, documents.queue_metadata(metadata)
        )
        resp.status = falcon.HTTP_201 if created else falcon.HTTP_204
        resp.location = views.queue_href(queue_name)

    @operation("Queue metadata", ok("200", "metadata", METADATA), home=HomeLink("rel/queue"))
    def on_get(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        resp.media = self.service.get_queue(req.context.project, queue_name)

    @operation(
        "Update metadata (JSON patch)",
        {**ok("200", "metadata", METADATA), **errors("404", "409", "415")},
        body=schemas.JSON_PATCH,
        home=HomeLink("rel/queue"),
    )
    def on_patch(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        if (req.content_type or "").split(";")[0].strip() != JSON_PATCH:
            raise falcon.HTTPUnsupportedMediaType(
                description=f"Accepted media type for PATCH: {{'Accept-Patch': '{JSON_PATCH}'}}."
            )
        limit = self.service.limits.max_queue_metadata
        payload = body.read(req, limit, _metadata_too_large(limit))
        if not payload.strip():
            raise falcon.HTTPBadRequest(
                title="Invalid request body",
                description="PATCH body could not be empty for update.",
            )
        resp.media = self.service.patch_queue(
            req.context.project, queue_name, jsondoc.loads(payload)
        )

    @operation("Delete a queue", ok("204", "deleted"), home=HomeLink("rel/queue"))
    def on_delete(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        self.service.delete_queue(req.context.project, queue_name)
        resp.status = falcon.HTTP_204


class QueueStats(Resource):
    @operation(
        "Queue statistics",
        ok("200", "stats", {"type": "object"}),
        home=HomeLink("rel/queue_stats"),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        stats = self.service.stats(req.context.project, queue_name)
        resp.media = views.stats(queue_name, stats, self.service.now_ms())


class QueueShare(Resource):
    """``POST /v2/queues/{queue}/share``: a pre-signed URL document (200)."""

    def __init__(self, service: Service, signer: Signer) -> None:
        super().__init__(service)
        self.signer = signer

    @operation(
        "Create a pre-signed URL",
        {**ok("200", "signed URL document", {"type": "object"}), **errors("403")},
        body={
            "type": "object",
            "properties": {
                "paths": {"type": "array", "items": {"type": "string"}},
                "methods": {"type": "array", "items": {"type": "string"}},
                "expires": {"type": "string", "format": "date-time"},
            },
        },
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        resp.media = self.signer.share(req.context.project, queue_name, body.read_json(req))


class QueuePurge(Resource):
    @operation(
        "Purge",
        {**ok("204", "purged"), **errors("404")},
        body={"type": "object", "properties": {"resource_types": {"type": "array"}}},
        home=HomeLink("rel/queue_purge"),
    )
    def on_post(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        kinds = documents.purge_types(body.read_json(req))
        self.service.purge(req.context.project, queue_name, kinds)
        resp.status = falcon.HTTP_204
