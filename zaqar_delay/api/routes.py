"""The API's one table of routes: each path template, the resource class that answers it, and
who may call it: without a token under Keystone (as Zaqar's ``public_endpoints``), without the
API's headers, or with the admin role only.

The router (``app.py``), the token-free paths (``auth.py``), the header and role checks
(``middleware.py``), the OpenAPI description (``openapi.py``) and the JSON-home document
(``home.py``) are made from it and from the ``@operation`` each responder declares (a
resource's methods are its ``on_*`` responders). The API reference and the isolation test are
checked against it (``tests/unit/test_routes.py``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from zaqar_delay.api.v2 import (
    claims,
    health,
    messages,
    pools,
    queues,
    schedules,
    subscriptions,
    versions,
)
from zaqar_delay.api.v2.base import Resource


@dataclasses.dataclass(frozen=True, slots=True)
class Route:
    template: str
    resource: type[Resource]
    tokenless: bool = False  # no X-Auth-Token needed with auth_strategy = keystone
    public: bool = False  # no Client-ID or X-Project-ID needed (documents for tools)
    admin: bool = False  # the admin role needed
    pooling: bool = False  # served only with [DEFAULT] pooling (the admin API of the catalog)
    home: bool = True  # its relations in the JSON-home document (Zaqar's has no topics)

    def responders(self) -> list[tuple[str, Callable[..., Any]]]:
        """``(HTTP method, responder)`` for each ``on_<method>`` of the resource, in the order
        the class declares them."""
        declared: dict[str, Callable[..., Any]] = {}
        for klass in reversed(self.resource.__mro__):  # a subclass serves what it inherits
            for name, responder in vars(klass).items():
                if name.startswith("on_") and callable(responder):
                    declared[name] = responder
        return [(name[3:].upper(), responder) for name, responder in declared.items()]

    def methods(self) -> frozenset[str]:
        """The HTTP methods the route answers."""
        return frozenset(method for method, _ in self.responders())


ROUTES: tuple[Route, ...] = (
    Route("/", versions.Versions, tokenless=True, public=True),
    Route("/openapi.json", versions.OpenAPIDocument, tokenless=True, public=True),
    Route("/v2/", versions.Home),
    Route("/v2/ping", health.Ping),
    Route("/v2/health", health.Health, admin=True),
    # Scrapers send no headers; its own check asks keystone tokens for the admin role.
    Route("/metrics", health.Metrics, public=True),
    Route("/v2/queues", queues.QueueCollection),
    Route("/v2/queues/{queue_name}", queues.QueueItem),
    Route("/v2/queues/{queue_name}/stats", queues.QueueStats),
    Route("/v2/queues/{queue_name}/purge", queues.QueuePurge),
    Route("/v2/queues/{queue_name}/share", queues.QueueShare),
    Route("/v2/queues/{queue_name}/messages", messages.MessageCollection),
    Route("/v2/queues/{queue_name}/messages/{message_id}", messages.MessageItem),
    Route("/v2/queues/{queue_name}/claims", claims.ClaimCollection),
    Route("/v2/queues/{queue_name}/claims/{claim_id}", claims.ClaimItem),
    Route("/v2/queues/{queue_name}/subscriptions", subscriptions.SubscriptionCollection),
    Route(
        "/v2/queues/{queue_name}/subscriptions/{subscription_id}",
        subscriptions.SubscriptionItem,
    ),
    Route(
        "/v2/queues/{queue_name}/subscriptions/{subscription_id}/confirm",
        subscriptions.SubscriptionConfirm,
    ),
    # Recurring schedules of a queue or a topic (an extension).
    *(
        Route(f"/v2/{kind}/{{{kind[:-1]}_name}}{path}", resource, home=kind == "queues")
        for kind in ("queues", "topics")
        for path, resource in (
            ("/schedules", schedules.ScheduleCollection),
            ("/schedules/{schedule_name}", schedules.ScheduleItem),
            ("/schedules/{schedule_name}/run", schedules.ScheduleRun),
        )
    ),
    # A topic is a queue without claims or shares (``topics.py``): the middleware validates
    # ``topic_name`` as a queue name and hands the responders the topic's stored name.
    Route("/v2/topics", queues.TopicCollection, home=False),
    Route("/v2/topics/{topic_name}", queues.QueueItem, home=False),
    Route("/v2/topics/{topic_name}/stats", queues.QueueStats, home=False),
    Route("/v2/topics/{topic_name}/purge", queues.QueuePurge, home=False),
    Route("/v2/topics/{topic_name}/messages", messages.MessageCollection, home=False),
    Route("/v2/topics/{topic_name}/messages/{message_id}", messages.MessageItem, home=False),
    Route(
        "/v2/topics/{topic_name}/subscriptions", subscriptions.SubscriptionCollection, home=False
    ),
    Route(
        "/v2/topics/{topic_name}/subscriptions/{subscription_id}",
        subscriptions.SubscriptionItem,
        home=False,
    ),
    Route(
        "/v2/topics/{topic_name}/subscriptions/{subscription_id}/confirm",
        subscriptions.SubscriptionConfirm,
        home=False,
    ),
    Route("/v2/pools", pools.PoolCollection, admin=True, pooling=True),
    Route("/v2/pools/{pool_name}", pools.PoolItem, admin=True, pooling=True),
    Route("/v2/flavors", pools.FlavorCollection, admin=True, pooling=True),
    Route("/v2/flavors/{flavor_name}", pools.FlavorItem, admin=True, pooling=True),
    Route("/v2/placements", pools.Placements, admin=True, pooling=True),
)

TOKENLESS_PATHS = frozenset(route.template for route in ROUTES if route.tokenless)
PUBLIC_TEMPLATES = frozenset(route.template for route in ROUTES if route.public)
ADMIN_TEMPLATES = frozenset(route.template for route in ROUTES if route.admin)
POOLING_TEMPLATES = frozenset(route.template for route in ROUTES if route.pooling)
