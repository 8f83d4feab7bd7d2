"""Each operation of the API declared next to its responder, with ``@operation(...)``: what the
OpenAPI description says of it and which JSON-home relation it belongs to. ``openapi`` and
``home`` make their documents from these declarations and the route table (``routes``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from zaqar_delay.api import schemas
from zaqar_delay.api.schemas import LimitOf, Schema
from zaqar_delay.conf import Limits

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "__zaqar_delay_operation__"


@dataclasses.dataclass(frozen=True, slots=True)
class HomeLink:
    """The operation's relation in the JSON-home document (Zaqar's names): ``query`` are the
    variables of its href-template's ``{?...}`` part with their parameter kinds."""

    rel: str
    query: tuple[tuple[str, str], ...] = ()
    accept_post: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class Operation:
    """One method of one route, as the OpenAPI description shows it. ``context`` are the
    headers it needs; ``plain`` operations (documents for tools: metrics, the description
    itself) go through no API checks, so they answer none of the API's 400 or 503 errors."""

    summary: str
    responses: Schema
    query: tuple[Schema, ...] = ()
    body: Schema | None = None
    context: tuple[Schema, ...] = tuple(schemas.CONTEXT)
    home: HomeLink | None = None
    plain: bool = False

    def describe(self, limits: Limits) -> Schema:
        """The OpenAPI operation object, with the server's ``limits`` filled in."""
        if self.plain:
            return {"summary": self.summary, "responses": self.responses}
        described: Schema = {
            "summary": self.summary,
            "parameters": [*self.context, *_filled(list(self.query), limits)],
        }
        if self.body is not None:
            described["requestBody"] = {
                "required": False,
                "content": schemas.json_content(self.body),
            }
        described["responses"] = {**self.responses, **schemas.errors("400", "503")}
        return described


def operation(
    summary: str,
    responses: Schema,
    *,
    query: Sequence[Schema] = (),
    body: Schema | None = None,
    context: Sequence[Schema] = schemas.CONTEXT,
    home: HomeLink | None = None,
    plain: bool = False,
) -> Callable[[F], F]:
    """Declare the responder's operation (see :class:`Operation`)."""
    declared = Operation(summary, responses, tuple(query), body, tuple(context), home, plain)

    def declare(responder: F) -> F:
        setattr(responder, ATTRIBUTE, declared)
        return responder

    return declare


def operation_of(responder: Callable[..., Any]) -> Operation:
    """The operation declared on ``responder``; LookupError when it has none."""
    declared = getattr(responder, ATTRIBUTE, None)
    if not isinstance(declared, Operation):
        raise LookupError(f"{responder.__qualname__} declares no @operation")
    return declared


def _filled(value: Any, limits: Limits) -> Any:
    """``value`` with every :class:`LimitOf` replaced by the limit it names."""
    if isinstance(value, LimitOf):
        return getattr(limits, value.name)
    if isinstance(value, dict):
        return {key: _filled(item, limits) for key, item in value.items()}
    if isinstance(value, list):
        return [_filled(item, limits) for item in value]
    return value
