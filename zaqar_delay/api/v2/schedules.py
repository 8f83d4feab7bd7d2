"""Recurring schedules of a queue or topic (a zaqar-delay extension): create or replace
(PUT), show, list, change (PATCH), delete, and run once now."""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from typing import Any

import falcon

from zaqar_delay import validation
from zaqar_delay.api import body, params, views
from zaqar_delay.api.operations import HomeLink, operation
from zaqar_delay.api.schemas import errors as responses
from zaqar_delay.api.schemas import ok, query
from zaqar_delay.api.v2.base import Resource
from zaqar_delay.policy import QueuePolicy

SCHEDULE: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cron": {"type": "string"},
        "timezone": {"type": "string"},
        "every": {"type": "integer"},
        "start_at": {"type": "string", "format": "date-time"},
        "end_at": {"type": "string", "format": "date-time"},
        "limit": {"type": "integer"},
        "misfire": {"type": "string", "enum": ["skip", "all"]},
        "paused": {"type": "boolean"},
        "message": {"type": "object"},
    },
}


def schedule_href(queue: str, name: str) -> str:
    return f"{views.queue_href(queue)}/schedules/{name}"


def _shown(queue: str, shown: dict[str, Any]) -> dict[str, Any]:
    """The schedule's document: times in RFC 3339 and its href."""
    last, failure = shown["last_fire"], shown["last_error"]
    return {
        **shown,
        "href": schedule_href(queue, shown["name"]),
        "next": [views.timestamp_ms(slot) for slot in shown["next"]],
        "last_fire": None
        if last is None
        else {
            "slot": views.timestamp_ms(last["slot"]),
            "message_id": last["message_id"],
            "at": views.timestamp_ms(last["at"]),
            "href": views.message_href(queue, last["message_id"]),
        },
        "last_error": None
        if failure is None
        else {
            **failure,
            **{key: views.timestamp_ms(failure[key]) for key in ("at", "since", "slot")},
        },
    }


class ScheduleCollection(Resource):
    @operation(
        "List schedules",
        ok("200", "schedules", {"type": "object"}),
        query=[query("limit", {"type": "integer"}), query("marker", {"type": "string"})],
        home=HomeLink("rel/schedules", (("marker", "marker"), ("limit", "size"))),
    )
    def on_get(self, req: falcon.Request, resp: falcon.Response, queue_name: str) -> None:
        limit = params.integer(req, "limit", 10)
        assert limit is not None
        validation.queue_limit(limit, self.service.limits)
        marker = params.text(req, "marker")
        project, now_ms = req.context.project, self.service.now_ms()
        found = self.service.schedules.names(project, queue_name, marker, limit)
        # One read per store for the page; a schedule deleted while listed is left out.
        shown = self.service.schedules.get_many(project, queue_name, found, now_ms)
        schedules = [_shown(queue_name, one) for one in shown]
        links = []
        if found:
            query_string = urllib.parse.urlencode({"limit": limit, "marker": found[-1]})
            href = f"{views.queue_href(queue_name)}/schedules?{query_string}"
            links.append({"rel": "next", "href": href})
        resp.media = {"schedules": schedules, "links": links}


class ScheduleItem(Resource):
    def _policy(self, project: str, queue: str) -> QueuePolicy:
        """The target's rules a schedule's message is held to: its size limit, and a key when
        it encrypts its messages."""
        policy = QueuePolicy.of(self.service.get_queue(project, queue))
        self.service.encryption.for_queue(policy)
        return policy

    def _write(self, write: Callable[..., Any], req: falcon.Request, queue: str, name: str) -> Any:
        """A PUT or PATCH: the request's body, held to the target's rules, now."""
        project = req.context.project
        policy = self._policy(project, queue)
        return write(project, queue, name, body.read_json(req), policy, self.service.now_ms())

    @operation(
        "Create or replace a schedule (201 created, 204 replaced)",
        {**ok("201", "created"), **ok("204", "replaced"), **responses("403")},
        body=SCHEDULE,
        home=HomeLink("rel/schedule"),
    )
    def on_put(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, schedule_name: str
    ) -> None:
        created = self._write(self.service.schedules.put, req, queue_name, schedule_name)
        resp.status = falcon.HTTP_201 if created else falcon.HTTP_204
        resp.location = schedule_href(queue_name, schedule_name)

    @operation(
        "Show a schedule",
        {**ok("200", "schedule", SCHEDULE), **responses("404")},
        home=HomeLink("rel/schedule"),
    )
    def on_get(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, schedule_name: str
    ) -> None:
        shown = self.service.schedules.get(
            req.context.project, queue_name, schedule_name, self.service.now_ms()
        )
        resp.media = _shown(queue_name, shown)

    @operation(
        "Change a schedule's fields (null removes one)",
        {**ok("204", "changed"), **responses("404")},
        body=SCHEDULE,
        home=HomeLink("rel/schedule"),
    )
    def on_patch(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, schedule_name: str
    ) -> None:
        self._write(self.service.schedules.patch, req, queue_name, schedule_name)
        resp.status = falcon.HTTP_204

    @operation("Delete a schedule", ok("204", "deleted"), home=HomeLink("rel/schedule"))
    def on_delete(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, schedule_name: str
    ) -> None:
        self.service.schedules.delete(req.context.project, queue_name, schedule_name)
        resp.status = falcon.HTTP_204


class ScheduleRun(Resource):
    @operation(
        "Fire a schedule once now, without moving its plan",
        {**ok("201", "the message posted", {"type": "object"}), **responses("404")},
        home=HomeLink("rel/schedule_run", accept_post=True),
    )
    def on_post(
        self, req: falcon.Request, resp: falcon.Response, queue_name: str, schedule_name: str
    ) -> None:
        message_id = self.service.schedules.run(
            req.context.project, queue_name, schedule_name, self.service.now_ms()
        )
        href = views.message_href(queue_name, message_id)
        resp.status = falcon.HTTP_201
        resp.location = href
        resp.media = {"message_id": message_id, "href": href}
