"""The API's one table of routes: each path template, the resource class that answers it, and
whether it is served without a token under Keystone (as Zaqar's ``public_endpoints``).

The router (``app.py``) and the token-free paths (``auth.py``) are made from it; the OpenAPI
description, the JSON-home document, the API reference and the isolation test are checked
against it (``tests/unit/test_routes.py``). A resource's methods are its ``on_*`` responders.
"""

from __future__ import annotations

import dataclasses

from zaqar_delay.api.v2 import claims, health, messages, queues, versions
from zaqar_delay.api.v2.base import Resource


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    template: str
    resource: type[Resource]
    tokenless: bool = False  # no X-Auth-Token needed with auth_strategy = keystone

    def methods(self) -> frozenset[str]:
        """The HTTP methods the route answers: its resource's ``on_<method>`` responders."""
        return frozenset(name[3:].upper() for name in dir(self.resource) if name.startswith("on_"))


ROUTES: tuple[Route, ...] = (
    Route("/", versions.Versions, tokenless=True),
    Route("/openapi.json", versions.OpenAPIDocument, tokenless=True),
    Route("/v2/", versions.Home),
    Route("/v2/ping", health.Ping),
    Route("/v2/health", health.Health),
    Route("/metrics", health.Metrics),
    Route("/v2/queues", queues.QueueCollection),
    Route("/v2/queues/{queue_name}", queues.QueueItem),
    Route("/v2/queues/{queue_name}/stats", queues.QueueStats),
    Route("/v2/queues/{queue_name}/purge", queues.QueuePurge),
    Route("/v2/queues/{queue_name}/share", queues.QueueShare),
    Route("/v2/queues/{queue_name}/messages", messages.MessageCollection),
    Route("/v2/queues/{queue_name}/messages/{message_id}", messages.MessageItem),
    Route("/v2/queues/{queue_name}/claims", claims.ClaimCollection),
    Route("/v2/queues/{queue_name}/claims/{claim_id}", claims.ClaimItem),
)

TOKENLESS_PATHS = frozenset(route.template for route in ROUTES if route.tokenless)
