"""The OpenAPI 3 description of the API, served at ``GET /openapi.json``.

``etc/openapi.json`` is this document as a file (``python -m zaqar_delay.api.openapi``
writes it; a unit test keeps them equal). It describes the wire format a client sees, for
generated clients and for fuzzing (``tests/functional/test_fuzz.py`` runs schemathesis against
a live server with it); the API reference in ``api-ref/`` remains the prose documentation.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from zaqar_delay import validation
from zaqar_delay.conf import Limits

Schema = dict[str, Any]

ERROR: Schema = {
    "type": "object",
    "required": ["title", "description"],
    "properties": {"title": {"type": "string"}, "description": {"type": "string"}},
}
QUEUE_NAME: Schema = {
    "type": "string",
    "pattern": f"^[a-zA-Z0-9_.-]{{1,{validation.QUEUE_NAME_MAX}}}$",
}
HEX_ID: Schema = {"type": "string", "pattern": "^[0-9a-f]{1,64}$"}
JSON_VALUE: Schema = {}  # any JSON document
FLAG: Schema = {"type": "boolean"}


def _header(name: str, schema: Schema, required: bool = True, about: str = "") -> Schema:
    return {
        "name": name,
        "in": "header",
        "required": required,
        "schema": schema,
        "description": about,
    }


def _query(name: str, schema: Schema, about: str = "") -> Schema:
    return {"name": name, "in": "query", "required": False, "schema": schema, "description": about}


def _path(name: str, schema: Schema) -> Schema:
    return {"name": name, "in": "path", "required": True, "schema": schema}


CONTEXT = [
    _header("Client-ID", {"type": "string", "format": "uuid"}, about="The client's UUID."),
    _header(
        "X-Project-ID",
        {"type": "string", "maxLength": validation.PROJECT_ID_MAX},
        about="The project (tenant).",
    ),
]
ADMIN = [*CONTEXT, _header("X-Roles", {"type": "string"}, required=False, about="admin")]


def _json(schema: Schema) -> Schema:
    return {"application/json": {"schema": schema}}


def _ok(status: str, about: str, schema: Schema | None = None) -> Schema:
    answer: Schema = {"description": about}
    if schema is not None:
        answer["content"] = _json(schema)
    return {status: answer}


def _errors(*statuses: str) -> Schema:
    return {s: {"description": "error", "content": _json(ERROR)} for s in statuses}


def _operation(
    summary: str,
    responses: Schema,
    parameters: list[Schema] | None = None,
    body: Schema | None = None,
    context: list[Schema] = CONTEXT,
) -> Schema:
    operation: Schema = {"summary": summary, "parameters": [*context, *(parameters or [])]}
    if body is not None:
        operation["requestBody"] = {"required": False, "content": _json(body)}
    operation["responses"] = {**responses, **_errors("400", "503")}
    return operation


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

Q = _path("queue_name", QUEUE_NAME)
M = _path("message_id", HEX_ID)
C = _path("claim_id", HEX_ID)


def document(limits: Limits | None = None) -> Schema:
    """The whole OpenAPI 3.0 document, for a server with these limits (the defaults when
    None: the form in ``etc/openapi.json``)."""
    max_wait = (limits or Limits()).max_claim_wait
    paths: Schema = {
        "/": {"get": _operation("Versions", _ok("300", "versions"), context=[])},
        "/v2/": {"get": _operation("Home document", _ok("200", "JSON-home"))},
        "/v2/ping": {
            "get": _operation("Liveness", _ok("204", "alive")),
            "head": _operation("Liveness", _ok("204", "alive")),
        },
        "/v2/health": {
            "get": _operation(
                "Health (admin role)", {**_ok("200", "report"), **_errors("403")}, context=ADMIN
            ),
        },
        "/v2/queues": {
            "get": _operation(
                "List queues",
                _ok("200", "queues", {"type": "object"}),
                [
                    _query("limit", {"type": "integer"}),
                    _query("marker", {"type": "string"}),
                    _query("detailed", FLAG),
                    _query("with_count", FLAG),
                ],
            )
        },
        "/v2/queues/{queue_name}": {
            "parameters": [Q],
            "put": _operation(
                "Create a queue",
                {**_ok("201", "created"), **_ok("204", "existed")},
                body=METADATA,
            ),
            "get": _operation("Queue metadata", _ok("200", "metadata", METADATA)),
            "patch": _operation(
                "Update metadata (JSON patch)",
                {**_ok("200", "metadata", METADATA), **_errors("404", "409", "415")},
                body=JSON_PATCH,
            ),
            "delete": _operation("Delete a queue", _ok("204", "deleted")),
        },
        "/v2/queues/{queue_name}/stats": {
            "parameters": [Q],
            "get": _operation("Queue statistics", _ok("200", "stats", {"type": "object"})),
        },
        "/v2/queues/{queue_name}/purge": {
            "parameters": [Q],
            "post": _operation(
                "Purge",
                {**_ok("204", "purged"), **_errors("404")},
                body={"type": "object", "properties": {"resource_types": {"type": "array"}}},
            ),
        },
        "/v2/queues/{queue_name}/share": {
            "parameters": [Q],
            "post": _operation(
                "Create a pre-signed URL",
                {**_ok("200", "signed URL document", {"type": "object"}), **_errors("403")},
                body={
                    "type": "object",
                    "properties": {
                        "paths": {"type": "array", "items": {"type": "string"}},
                        "methods": {"type": "array", "items": {"type": "string"}},
                        "expires": {"type": "string", "format": "date-time"},
                    },
                },
            ),
        },
        "/v2/queues/{queue_name}/messages": {
            "parameters": [Q],
            "post": _operation(
                "Post messages",
                _ok("201", "the message hrefs, and which were duplicates", POSTED),
                body={
                    "type": "object",
                    "required": ["messages"],
                    "properties": {"messages": {"type": "array", "items": MESSAGE_IN}},
                },
            ),
            "get": _operation(
                "List or bulk-get messages (404: none of the ids exists)",
                {**_ok("200", "messages", MESSAGES_OUT), **_ok("204", "none"), **_errors("404")},
                [
                    _query("ids", {"type": "string"}),
                    _query("marker", {"type": "string"}),
                    _query("limit", {"type": "integer"}),
                    _query("echo", FLAG),
                    _query("include_claimed", FLAG),
                    _query("include_delayed", FLAG),
                    _query("sort", {"type": "string", "enum": ["posted", "due"]}),
                    _query("with_schedule", FLAG),
                ],
            ),
            "delete": _operation(
                "Bulk delete or pop",
                {**_ok("200", "popped", MESSAGES_OUT), **_ok("204", "deleted"), **_errors("403")},
                [
                    _query("ids", {"type": "string"}),
                    _query("claim_ids", {"type": "string"}),
                    _query("pop", {"type": "integer"}),
                ],
            ),
        },
        "/v2/queues/{queue_name}/messages/{message_id}": {
            "parameters": [Q, M],
            "get": _operation(
                "Get a message",
                {**_ok("200", "message", MESSAGE_OUT), **_errors("404")},
                [_query("with_schedule", FLAG)],
            ),
            "patch": _operation(
                "Reschedule (extension)",
                {**_ok("204", "rescheduled"), **_errors("403", "404")},
                [_query("claim_id", HEX_ID)],
                body={
                    "type": "object",
                    "properties": {"delay": {"type": "integer"}, "deliver_at": JSON_VALUE},
                },
            ),
            "delete": _operation(
                "Delete a message",
                {**_ok("204", "deleted"), **_errors("403")},
                [_query("claim_id", HEX_ID)],
            ),
        },
        "/v2/queues/{queue_name}/claims": {
            "parameters": [Q],
            "post": _operation(
                "Claim messages",
                {**_ok("201", "claimed", MESSAGES_OUT), **_ok("204", "nothing to claim")},
                [
                    _query("limit", {"type": "integer"}),
                    _query("wait", {"type": "integer", "minimum": 0, "maximum": max_wait}),
                    _query("with_schedule", FLAG),
                ],
                body=CLAIM_BODY,
            ),
        },
        "/v2/queues/{queue_name}/claims/{claim_id}": {
            "parameters": [Q, C],
            "get": _operation(
                "Get a claim", {**_ok("200", "claim", {"type": "object"}), **_errors("404")}
            ),
            "patch": _operation(
                "Renew a claim", {**_ok("204", "renewed"), **_errors("404")}, body=CLAIM_BODY
            ),
            "delete": _operation("Release a claim", _ok("204", "released")),
        },
        "/metrics": {
            "get": {
                "summary": "Prometheus metrics (with keystone: a token with the admin role)",
                "responses": {"200": {"description": "text exposition"}, **_errors("403")},
            }
        },
        "/openapi.json": {
            "get": {
                "summary": "This document",
                "responses": {"200": {"description": "OpenAPI 3", "content": _json({})}},
            }
        },
    }
    return {
        "openapi": "3.0.3",
        "info": {
            "title": "zaqar-delay",
            "version": "2",
            "description": "The Zaqar v2 messaging API with delayed delivery "
            "(see api-ref/ for the full reference).",
        },
        "paths": paths,
    }


def dumps(limits: Limits | None = None) -> str:
    return json.dumps(document(limits), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    sys.stdout.write(dumps())
