"""The pieces of the OpenAPI description: schemas of the bodies and parameters the API
speaks, and helpers to describe answers. Operations use them next to their responders
(``operations.operation``); ``openapi`` assembles the document."""

from __future__ import annotations

import dataclasses
from typing import Any

from zaqar_delay import validation

Schema = dict[str, Any]

ERROR: Schema = {
    "type": "object",
    "required": ["title", "description"],
    "properties": {"title": {"type": "string"}, "description": {"type": "string"}},
}
QUEUE_NAME: Schema = {
    "type": "string",
    # Not "." or "..": validation.DOT_SEGMENTS.
    "pattern": f"^(?!\\.\\.?$)[a-zA-Z0-9_.-]{{1,{validation.QUEUE_NAME_MAX}}}$",
}
HEX_ID: Schema = {"type": "string", "pattern": "^[0-9a-f]{1,64}$"}
JSON_VALUE: Schema = {}  # any JSON document
FLAG: Schema = {"type": "boolean"}


def header(name: str, schema: Schema, required: bool = True, about: str = "") -> Schema:
    return {
        "name": name,
        "in": "header",
        "required": required,
        "schema": schema,
        "description": about,
    }


def query(name: str, schema: Schema, about: str = "") -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": about}


def path(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": schema}


CONTEXT = [
    header("Client-ID", {"type": "string", "format": "uuid"}, about="The client's UUID."),
    header(
        "X-Project-ID",
        {"type": "string", "maxLength": validation.PROJECT_ID_MAX},
        about="The project (tenant).",
    ),
]
ADMIN = [*CONTEXT, header("X-Roles", {"type": "string"}, required=False, about="admin")]


def json_content(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}}


def ok(status: str, about: str, schema: Schema | None = None) -> Schema:
    answer: Schema = {"description": about}
    if schema is not None:
        answer["content"] = json_content(schema)
    return {status: answer}


def errors(*statuses: str) -> Schema:
    return {s: {"description": "error", "content": json_content(ERROR)} for s in statuses}


MESSAGE_IN: Schema = {
    "type": "object",
    "required": ["body"],
    "properties": {
        "body": JSON_VALUE,
        "ttl": {"type": "integer"},
        "delay": {"type": "integer"},
        "deliver_at": {"oneOf": [{"type": "string", "format": "date-time"}, {"type": "integer"}]},
        "dedup_id": {"type": "string", "minLength": 1, "maxLength": validation.DEDUP_ID_MAX},
    },
}
POSTED: Schema = {
    "type": "object",
    "required": ["resources", "duplicates"],
    "properties": {
        "resources": {"type": "array", "items": {"type": "string"}},
        "duplicates": {"type": "array", "items": {"type": "string"}},
    },
}
MESSAGE_OUT: Schema = {
    "type": "object",
    "required": ["id", "href", "ttl", "age", "body"],
    "properties": {
        "id": {"type": "string"},
        "href": {"type": "string"},
        "ttl": {"type": "integer"},
        "age": {"type": "integer"},
        "body": JSON_VALUE,
        "checksum": {"type": "string"},
        "due": {"type": "string", "format": "date-time"},
        "claim_count": {"type": "integer"},
    },
}
MESSAGES_OUT: Schema = {
    "type": "object",
    "properties": {"messages": {"type": "array", "items": MESSAGE_OUT}, "links": {}},
}
CLAIM_BODY: Schema = {
    "type": "object",
    "properties": {"ttl": {"type": "integer"}, "grace": {"type": "integer"}},
}
METADATA: Schema = {"type": "object", "additionalProperties": True}
JSON_PATCH: Schema = {
    "type": "array",
    "items": {
        "type": "object",
        "required": ["op", "path"],
        "properties": {
            "op": {"type": "string", "enum": ["add", "replace", "remove"]},
            "path": {"type": "string"},
            "value": JSON_VALUE,
        },
    },
}

SUBSCRIPTION_IN: Schema = {
    "type": "object",
    "properties": {
        "subscriber": {"type": "string"},
        "ttl": {"type": "integer"},
        "options": {"type": "object"},
    },
}
SUBSCRIPTION_ID: Schema = {
    "type": "object",
    "required": ["subscription_id"],
    "properties": {"subscription_id": {"type": "string"}, "signing_secret": {"type": "string"}},
}
SUBSCRIPTION_OUT: Schema = {
    "type": "object",
    "required": ["id", "source", "subscriber", "ttl", "age", "options", "confirmed"],
    "properties": {
        "id": {"type": "string"},
        "source": {"type": "string"},
        "subscriber": {"type": "string"},
        "ttl": {"type": "integer"},
        "age": {"type": "integer"},
        "options": {"type": "object"},
        "confirmed": {"type": "boolean"},
        "last_delivery": {
            "type": "object",
            "required": ["at", "outcome", "detail"],
            "properties": {
                "at": {"type": "string"},
                "outcome": {"type": "string", "enum": ["delivered", "retry", "permanent"]},
                "detail": {"type": "string"},
            },
        },
    },
}

PATH_PARAMETERS: dict[str, Schema] = {
    "queue_name": path("queue_name", QUEUE_NAME),
    "topic_name": path("topic_name", QUEUE_NAME),
    "schedule_name": path("schedule_name", QUEUE_NAME),
    "message_id": path("message_id", HEX_ID),
    "claim_id": path("claim_id", HEX_ID),
    "subscription_id": path("subscription_id", {"type": "string"}),
    "pool_name": path("pool_name", {"type": "string"}),
    "flavor_name": path("flavor_name", {"type": "string"}),
}


@dataclasses.dataclass(frozen=True, slots=True)
class LimitOf:
    """A value in a schema that is one of the server's limits (``conf.Limits``), filled in
    when the document is made for a server."""

    name: str
