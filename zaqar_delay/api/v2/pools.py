"""The admin API of pooling: pools and flavors (Zaqar v2 bodies and codes)."""

from __future__ import annotations

import urllib.parse
from collections.abc import Sequence
from typing import Any

import falcon

from zaqar_delay import errors
from zaqar_delay.api import body, params
from zaqar_delay.api.operations import operation
from zaqar_delay.api.schemas import ADMIN, FLAG, ok, query
from zaqar_delay.api.schemas import errors as error_codes
from zaqar_delay.api.v2.base import Resource
from zaqar_delay.pooling.registry import Registry, pool_view
from zaqar_delay.service import Service

LISTING = [
    query(
        "limit",
        {"type": "integer", "minimum": 1},
        "At most [transport] max_pools_per_page or max_flavors_per_page (20 each by default).",
    ),
    query("marker", {"type": "string"}),
    query("detailed", FLAG),
]
POOL_IN = {
    "type": "object",
    "properties": {
        "uri": {"type": "string", "maxLength": 255},
        "weight": {"type": "integer", "minimum": 0, "maximum": 2**32 - 1},
        "flavor": {"type": ["string", "null"], "maxLength": 255},
        "options": {"type": "object"},
    },
}
FLAVOR_IN = {
    "type": "object",
    "properties": {
        "pool_list": {"type": "array", "items": {"type": "string"}, "minItems": 1},
        "capabilities": {"type": "object"},
    },
}


class CatalogResource(Resource):
    """A resource of the admin API, on the catalog's registry."""

    def __init__(self, service: Service, registry: Registry) -> None:
        super().__init__(service)
        self.registry = registry


def _page(req: falcon.Request, most: int) -> tuple[str | None, int, bool]:
    """``marker``, ``limit`` (1 to ``most``, default 10 or ``most`` if lower) and ``detailed``
    of a listing."""
    limit = params.integer(req, "limit", min(10, most))
    assert limit is not None
    if not 1 <= limit <= most:
        raise errors.InvalidRequest(f"Limit must be at least 1 and no greater than {most}.")
    return params.text(req, "marker"), limit, params.boolean(req, "detailed")


def _listing(
    req: falcon.Request,
    kind: str,
    entries: Sequence[dict[str, Any]],
    limit: int,
    detailed: bool,
) -> dict[str, Any]:
    links = []
    if entries:
        query_string = urllib.parse.urlencode(
            {"marker": entries[-1]["name"], "limit": limit, "detailed": str(detailed).lower()}
        )
        links.append({"rel": "next", "href": f"{req.path}?{query_string}"})
    for entry in entries:
        entry["href"] = f"{req.path}/{entry['name']}"
    return {kind: list(entries), "links": links}


class PoolCollection(CatalogResource):
    @operation(
        "List pools (admin)",
        ok("200", "pools", {"type": "object"}),
        query=LISTING,
        context=ADMIN,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        marker, limit, detailed = _page(req, self.service.limits.max_pools_per_page)
        pools = self.registry.list_pools(marker, limit)
        entries = [pool_view(p, detailed) for p in pools]
        resp.media = _listing(req, "pools", entries, limit, detailed)


class PoolItem(CatalogResource):
    @operation(
        "Register or replace a pool (admin; 400: unreachable or unlike its flavor's pools)",
        {**ok("201", "registered"), **error_codes("409")},
        body=POOL_IN,
        context=ADMIN,
    )
    def on_put(self, req: falcon.Request, resp: falcon.Response, pool_name: str) -> None:
        self.registry.put_pool(pool_name, body.read_json(req))
        resp.status = falcon.HTTP_201
        resp.location = req.path

    @operation(
        "Show a pool (admin)",
        {**ok("200", "the pool", {"type": "object"}), **error_codes("404")},
        query=[query("detailed", FLAG)],
        context=ADMIN,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, pool_name: str) -> None:
        view = pool_view(self.registry.get_pool(pool_name), params.boolean(req, "detailed"))
        resp.media = {**view, "href": req.path}

    @operation(
        "Change a pool's weight, URI, flavor or options (admin)",
        {**ok("200", "the pool", {"type": "object"}), **error_codes("404", "409")},
        body=POOL_IN,
        context=ADMIN,
    )
    def on_patch(self, req: falcon.Request, resp: falcon.Response, pool_name: str) -> None:
        pool = self.registry.patch_pool(pool_name, body.read_json(req))
        resp.media = {**pool_view(pool, False), "href": req.path}

    @operation(
        "Deregister a pool (admin; 403: a flavor uses it; 409: queues live on it)",
        {**ok("204", "deregistered"), **error_codes("403", "409")},
        context=ADMIN,
    )
    def on_delete(self, req: falcon.Request, resp: falcon.Response, pool_name: str) -> None:
        self.registry.delete_pool(pool_name)
        resp.status = falcon.HTTP_204


class FlavorCollection(CatalogResource):
    @operation(
        "List flavors (admin)",
        ok("200", "flavors", {"type": "object"}),
        query=LISTING,
        context=ADMIN,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        marker, limit, detailed = _page(req, self.service.limits.max_flavors_per_page)
        flavors = self.registry.list_flavors(marker, limit)
        entries = []
        for flavor in flavors:
            view = self.registry.flavor_view(flavor)
            if not detailed:
                del view["capabilities"]
            entries.append(view)
        resp.media = _listing(req, "flavors", entries, limit, detailed)


class FlavorItem(CatalogResource):
    @operation(
        "Create or replace a flavor of pools (admin)",
        {**ok("201", "created")},
        body=FLAVOR_IN,
        context=ADMIN,
    )
    def on_put(self, req: falcon.Request, resp: falcon.Response, flavor_name: str) -> None:
        self.registry.put_flavor(flavor_name, body.read_json(req))
        resp.status = falcon.HTTP_201
        resp.location = req.path

    @operation(
        "Show a flavor: its pools and their capabilities (admin)",
        {**ok("200", "the flavor", {"type": "object"}), **error_codes("404")},
        context=ADMIN,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, flavor_name: str) -> None:
        view = self.registry.flavor_view(self.registry.get_flavor(flavor_name))
        resp.media = {**view, "href": req.path}

    @operation(
        "Change a flavor's pools (admin)",
        {**ok("200", "the flavor", {"type": "object"}), **error_codes("404")},
        body=FLAVOR_IN,
        context=ADMIN,
    )
    def on_patch(self, req: falcon.Request, resp: falcon.Response, flavor_name: str) -> None:
        flavor = self.registry.patch_flavor(flavor_name, body.read_json(req))
        resp.media = {**self.registry.flavor_view(flavor), "href": req.path}

    @operation(
        "Delete a flavor; its pools stay (admin)",
        ok("204", "deleted"),
        context=ADMIN,
    )
    def on_delete(self, req: falcon.Request, resp: falcon.Response, flavor_name: str) -> None:
        self.registry.delete_flavor(flavor_name)
        resp.status = falcon.HTTP_204


# Queues per page of GET /v2/placements.
MAX_PLACEMENTS_PER_PAGE = 100


class Placements(CatalogResource):
    @operation(
        "Where a project's queues live: each queue's pool, in name order, and the number of "
        "queues on each pool (admin)",
        ok("200", "placements", {"type": "object"}),
        query=[
            query("project", {"type": "string", "maxLength": 256}),
            query("limit", {"type": "integer", "minimum": 1, "maximum": MAX_PLACEMENTS_PER_PAGE}),
            query("marker", {"type": "string"}),
        ],
        context=ADMIN,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        # An admin looks at any project; without ``project``, at the caller's own.
        project = params.text(req, "project") or req.context.project
        limit = params.integer(req, "limit", 20)
        assert limit is not None
        if not 1 <= limit <= MAX_PLACEMENTS_PER_PAGE:
            raise errors.InvalidRequest(
                f"Limit must be at least 1 and no greater than {MAX_PLACEMENTS_PER_PAGE}."
            )
        placed = self.registry.placements(project, params.text(req, "marker"), limit)
        links = []
        if placed:
            next_query = urllib.parse.urlencode(
                {"project": project, "marker": placed[-1][0], "limit": limit}
            )
            links.append({"rel": "next", "href": f"{req.path}?{next_query}"})
        resp.media = {
            "project": project,
            "placements": [{"queue": queue, "pool": pool} for queue, pool in placed],
            "queues_per_pool": self.registry.queues_per_pool(),
            "links": links,
        }


# The resources made with the registry (``app.py``).
CATALOG_RESOURCES: tuple[type[CatalogResource], ...] = (
    PoolCollection,
    PoolItem,
    FlavorCollection,
    FlavorItem,
    Placements,
)
