"""Zaqar v2's WebSocket actions, each the HTTP request of the same operation.

A frame's ``body`` names the resource (``queue_name``, ``message_id``, ...), the query
parameters and the request body of the route; ``ACTIONS`` says which go where. The HTTP
answer becomes the frame's ``body`` in Zaqar's WebSocket shapes: the ids of posted messages,
a claim's id beside its messages, a sentence for what answers 204 over HTTP.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

#: The fields that name a resource in a route's path: non-empty text without a path
#: separator (the routes check each name's own rules).
PATH_FIELDS = ("queue_name", "topic_name", "message_id", "claim_id", "subscription_id")

# What the frame's body gave, and the HTTP answer's status, Location header and JSON body.
Shaper = Callable[[Mapping[str, Any], int, str, Any], Any]


def as_is(_: Mapping[str, Any], __: int, ___: str, answer: Any) -> Any:
    return {} if answer is None else answer


def done(sentence: str) -> Shaper:
    """A 2xx answer without a body as Zaqar's sentence (``{queue_name}`` and the like filled
    from the frame's body)."""

    def shape(body: Mapping[str, Any], status: int, _: str, answer: Any) -> Any:
        if answer is None and 200 <= status < 300:
            named = {name: body.get(name) for name in PATH_FIELDS}
            named["queue_name"] = named["queue_name"] or named["topic_name"]
            return sentence.format_map(named)
        return as_is(body, status, _, answer)

    return shape


def posted_ids(body: Mapping[str, Any], status: int, location: str, answer: Any) -> Any:
    """``{"resources": [hrefs]}`` as ``{"message_ids": [...]}``."""
    if status == 201 and isinstance(answer, dict):
        return {"message_ids": [href.rsplit("/", 1)[-1] for href in answer.get("resources", [])]}
    return as_is(body, status, location, answer)


def one_message(body: Mapping[str, Any], status: int, location: str, answer: Any) -> Any:
    """A message as ``{"messages": message}``, as Zaqar's ``message_get`` answers."""
    if status == 200:
        return {"messages": answer}
    return as_is(body, status, location, answer)


def claimed(body: Mapping[str, Any], status: int, location: str, answer: Any) -> Any:
    """The claim's messages with the claim's id (from the Location header); a claim that
    found nothing to take has none."""
    if status == 201 and isinstance(answer, dict):
        return {"claim_id": location.rsplit("/", 1)[-1], "messages": answer.get("messages", [])}
    if status == 204:
        return {"claim_id": None, "messages": []}
    return as_is(body, status, location, answer)


def subscribed(body: Mapping[str, Any], status: int, location: str, answer: Any) -> Any:
    """A new subscription's id (and signing secret) with Zaqar's sentence."""
    if status == 201 and isinstance(answer, dict):
        named = body.get("queue_name") or body.get("topic_name")
        return {**answer, "message": f"Subscription {named} created."}
    return as_is(body, status, location, answer)


@dataclasses.dataclass(frozen=True)
class Action:
    """One action: its HTTP method and path (``{field}`` from the frame's body), the body
    fields sent as query parameters (``query``: frame name to query name) and as the request
    body (``sent``), and how the answer is shaped."""

    method: str
    path: str
    query: Mapping[str, str] = dataclasses.field(default_factory=dict)
    sent: tuple[str, ...] = ()
    shape: Shaper = as_is
    # A request body even when the frame gives none of ``sent`` (an empty object).
    always_body: bool = False
    # The frame's field that is the whole request body (a queue's metadata).
    entire: str = ""
    # What the request body holds when the frame does not say (Zaqar's defaults).
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def path_fields(self) -> list[str]:
        return [name for name in PATH_FIELDS if "{" + name + "}" in self.path]


QUEUE = "/v2/queues/{queue_name}"
TOPIC = "/v2/topics/{topic_name}"
MESSAGES = QUEUE + "/messages"
CLAIMS = QUEUE + "/claims"
SUBSCRIPTIONS = QUEUE + "/subscriptions"
LISTING = {"marker": "marker", "limit": "limit"}

ACTIONS: dict[str, Action] = {
    "get_home_doc": Action("GET", "/v2/"),
    "check_node_health": Action("GET", "/v2/health"),
    "ping_node": Action("GET", "/v2/ping"),
    "queue_list": Action("GET", "/v2/queues", {**LISTING, "detailed": "detailed"}),
    "queue_create": Action(
        "PUT", QUEUE, shape=done("Queue {queue_name} created."), always_body=True, entire="metadata"
    ),
    "queue_delete": Action("DELETE", QUEUE, shape=done("Queue {queue_name} removed.")),
    "queue_get": Action("GET", QUEUE),
    "queue_get_stats": Action("GET", QUEUE + "/stats"),
    "queue_purge": Action(
        "POST",
        QUEUE + "/purge",
        sent=("resource_types",),
        defaults={"resource_types": ["messages", "subscriptions"]},
    ),
    "message_list": Action(
        "GET",
        MESSAGES,
        {
            **LISTING,
            "echo": "echo",
            "include_claimed": "include_claimed",
            "include_delayed": "include_delayed",
        },
    ),
    "message_get": Action("GET", MESSAGES + "/{message_id}", shape=one_message),
    "message_get_many": Action("GET", MESSAGES, {"message_ids": "ids"}),
    "message_post": Action(
        "POST", MESSAGES, sent=("messages",), shape=posted_ids, always_body=True
    ),
    "message_delete": Action("DELETE", MESSAGES + "/{message_id}", {"claim_id": "claim_id"}),
    "message_delete_many": Action(
        "DELETE", MESSAGES, {"message_ids": "ids", "claim_ids": "claim_ids", "pop": "pop"}
    ),
    "claim_create": Action(
        "POST", CLAIMS, {"limit": "limit"}, ("ttl", "grace"), claimed, always_body=True
    ),
    "claim_get": Action("GET", CLAIMS + "/{claim_id}"),
    "claim_update": Action(
        "PATCH",
        CLAIMS + "/{claim_id}",
        sent=("ttl", "grace"),
        shape=done("Claim {claim_id} updated."),
        always_body=True,
    ),
    "claim_delete": Action(
        "DELETE", CLAIMS + "/{claim_id}", shape=done("Claim {claim_id} deleted.")
    ),
    "subscription_list": Action("GET", SUBSCRIPTIONS, LISTING),
    "subscription_create": Action(
        "POST",
        SUBSCRIPTIONS,
        sent=("subscriber", "ttl", "options"),
        shape=subscribed,
        always_body=True,
    ),
    "subscription_get": Action("GET", SUBSCRIPTIONS + "/{subscription_id}"),
    "subscription_delete": Action(
        "DELETE",
        SUBSCRIPTIONS + "/{subscription_id}",
        shape=done("Subscription {subscription_id} removed."),
    ),
}


def addressed(action: Action, body: Mapping[str, Any]) -> Action:
    """The action on the topic the frame's body names in ``topic_name`` (a zaqar-delay
    extension: Zaqar's WebSocket API has no topics) rather than on a queue. A topic serves no
    claims, so a claim action on one answers 404 as its HTTP route would."""
    if "topic_name" not in body or "queue_name" in body or QUEUE not in action.path:
        return action
    return dataclasses.replace(action, path=action.path.replace(QUEUE, TOPIC))
