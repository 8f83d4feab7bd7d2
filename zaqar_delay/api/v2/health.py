"""GET|HEAD /v2/ping, the admin-only GET /v2/health, and GET /metrics (Prometheus)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import falcon

from zaqar_delay import metrics
from zaqar_delay.api import schemas
from zaqar_delay.api.operations import HomeLink, operation
from zaqar_delay.api.schemas import ADMIN, ok
from zaqar_delay.api.v2.base import Resource
from zaqar_delay.models import ClaimTimes

HEALTH_PROJECT = "zaqar-delay-health"
HEALTH_CLAIM = ClaimTimes(ttl_s=60, grace_s=60)


class Ping(Resource):
    @operation("Liveness", ok("204", "alive"), home=HomeLink("rel/ping"))
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_204 if self.service.stores_reachable() else falcon.HTTP_503

    @operation("Liveness", ok("204", "alive"), home=HomeLink("rel/ping"))
    def on_head(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.status = falcon.HTTP_204


class Health(Resource):
    """Exercises every storage operation on a throw-away queue and reports each one."""

    @operation(
        "Health (admin role)",
        {**ok("200", "report"), **schemas.errors("403")},
        context=ADMIN,
        home=HomeLink("rel/health"),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        reachability = self.service.store_reachability()
        report: dict[str, Any] = {"storage_reachable": all(reachability.values())}
        if len(reachability) > 1:  # pools: which store does not answer
            report["stores"] = {
                name: {"storage_reachable": answers} for name, answers in reachability.items()
            }
        # With the default store answering, a queue is placed on a pool that answers: the
        # operations are tried, and show what still works while a pool is away.
        if next(iter(reachability.values())):
            report["operation_status"] = self._exercise()
            durability = self.service.durability()
            if durability is not None:
                report["durability"] = dataclasses.asdict(durability)
        resp.media = report

    def _exercise(self) -> dict[str, Any]:
        service = self.service
        queue = f"health-{time.time_ns()}"
        client = "0" * 32
        state: dict[str, Any] = {}
        steps: list[tuple[str, Callable[[], Any]]] = [
            ("create_queue", lambda: service.create_queue(HEALTH_PROJECT, queue, {})),
            (
                "post_messages",
                lambda: state.update(
                    posted=service.post_messages(
                        HEALTH_PROJECT, queue, b'{"messages":[{"body":1},{"body":2}]}', client
                    ).ids
                ),
            ),
            (
                "claim_messages",
                lambda: state.update(
                    claim=service.create_claim(HEALTH_PROJECT, queue, HEALTH_CLAIM, 1)
                ),
            ),
            (
                "list_messages",
                lambda: service.list_messages(
                    HEALTH_PROJECT,
                    queue,
                    client_id=client,
                    marker=None,
                    limit=10,
                    echo=True,
                    include_claimed=True,
                    include_delayed=True,
                ),
            ),
            (
                # As Zaqar's: delete the claimed message with its claim id.
                "delete_messages",
                lambda: service.delete_message(
                    HEALTH_PROJECT,
                    queue,
                    state["claim"].messages[0].id,
                    state["claim"].id,
                ),
            ),
            (
                "delete_claim",
                lambda: service.release_claim(HEALTH_PROJECT, queue, state["claim"].id),
            ),
            (
                "bulk_delete_messages",
                lambda: service.delete_messages(HEALTH_PROJECT, queue, state["posted"], None),
            ),
            ("delete_queue", lambda: service.delete_queue(HEALTH_PROJECT, queue)),
        ]
        status: dict[str, Any] = {}
        for name, step in steps:
            started = time.perf_counter()
            try:
                step()
                succeeded = True
            except Exception:  # noqa: BLE001 - a failed step is reported, not raised
                succeeded = False
            status[name] = {
                "succeeded": succeeded,
                "seconds": round(time.perf_counter() - started, 6),
                "ref": None,
            }
        return status


class Metrics(Resource):
    """Prometheus text exposition. Needs no Client-ID or project (scrapers send none); under
    keystone its rule (``metrics:get``, admin by default) needs a token, since its labels
    name projects and queues. In noauth mode keep it on a trusted network."""

    @operation(
        "Prometheus metrics (with keystone: a token with the admin role)",
        {"200": {"description": "text exposition"}, **schemas.errors("403")},
        plain=True,
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response) -> None:
        resp.content_type = metrics.CONTENT_TYPE
        resp.data = self.service.metrics.render()
