"""Request bodies as typed values: what a decoded JSON body must look like before a use case
sees it. Each raises InvalidBody (wrong shape) or InvalidRequest (a rule broken) with Zaqar's
wording."""

from __future__ import annotations

from typing import Any

from zaqar_delay import errors, validation
from zaqar_delay.conf import Limits
from zaqar_delay.models import ClaimTimes, Metadata

PURGEABLE = frozenset({"messages", "subscriptions"})


def _object(document: Any) -> dict[str, Any]:
    if not isinstance(document, dict):
        raise errors.InvalidBody("Document type not supported.")
    return document


def queue_metadata(document: Any) -> Metadata:
    """A PUT queue body: an object (none means empty metadata)."""
    return {} if document is None else _object(document)


def claim_times(document: Any, limits: Limits) -> ClaimTimes:
    """A claim's optional ``{"ttl", "grace"}`` body, defaults filled in and limits checked."""
    fields = {} if document is None else _object(document)
    ttl = validation.integer_field(fields, "ttl", limits.default_claim_ttl)
    grace = validation.integer_field(fields, "grace", limits.default_claim_grace)
    return ClaimTimes(validation.claim_ttl(ttl, limits), validation.claim_grace(grace, limits))


def purge_types(document: Any) -> frozenset[str]:
    """The optional ``{"resource_types": [...]}`` purge body; both kinds when absent."""
    if document is None:
        return PURGEABLE
    if not isinstance(document, dict) or "resource_types" not in document:
        raise errors.InvalidRequest('Post body must contain key "resource_types".')
    kinds = document["resource_types"]
    if not isinstance(kinds, list) or not set(map(str, kinds)) <= PURGEABLE:
        raise errors.InvalidRequest(
            "Resource types must be a sub set of {'messages', 'subscriptions'}."
        )
    return frozenset(map(str, kinds))
