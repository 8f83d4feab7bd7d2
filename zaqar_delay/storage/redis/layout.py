"""The facts the Lua scripts and the Python side of the Redis driver share, written once.

The scripts get them as a prelude of ``local`` constants generated from here (:func:`prelude`)
and placed before ``lua/lib.lua``, so no script spells one itself: the order of a queue's keys
(``KEYS``, from :class:`~zaqar_delay.storage.redis.keys.QueueKeys`), the message record layout
and its kind bits, the bucket size, the parked-push marker, the claim-refusal replies, the
settle kinds, the protocols' bounds they use (:mod:`zaqar_delay.storage.bounds`), and the
metadata and option names the scripts read (:mod:`zaqar_delay.policy`,
:mod:`zaqar_delay.dispatch_limits`).
"""

from __future__ import annotations

import dataclasses
import struct

from zaqar_delay import dispatch_limits as limits
from zaqar_delay import policy, push_hops
from zaqar_delay.storage import bounds
from zaqar_delay.storage.base import ANY_METADATA_VERSION
from zaqar_delay.storage.deliveries import PARKED
from zaqar_delay.storage.redis.keys import (
    QUEUE_SUFFIX,
    TRASH_INDEXES_SUFFIX,
    TRASH_SUFFIX,
    QueueKeys,
)

# Messages are stored by sequence number, BUCKET_SIZE to a bucket: what Redis keeps as a
# compact listpack (hash-max-listpack-entries, 128 by default).
BUCKET_SIZE = 128
# What one queue.lua "sweep" call frees of a purged or deleted queue: buckets (8,192
# messages) and entries of its big indexes, a few milliseconds of the store's time, so other
# clients' calls run in between (an index this small or smaller is deleted at once;
# removal.py).
SWEEP_BUCKETS = 64
SWEEP_ENTRIES = 4096
# queue.lua's flag for a purge or deletion: unlink big indexes whole (removal.py says when).
UNLINK_INDEXES = "unlink"

# A message record: this head (created ms, expires ms, due ms, ttl s, claim count, kind), then
# the id part (ID_RANDOM_BYTES random bytes, or a length byte and the whole id with
# KIND_ID_KEPT), with KIND_HOPS a byte of hops (the pushes the message came through), and the
# client id (16 bytes with a KIND_CLIENT_* bit, else as given).
RECORD_HEAD = struct.Struct(">QQQIHB")
ID_RANDOM_BYTES = 8
KIND_CLIENT_PACKED = 1  # the client id, 32 lowercase hex digits, stored as its 16 bytes
KIND_ID_KEPT = 2  # the message came from another queue with its id (dead-letter moves)
KIND_CLIENT_DASHED = 4  # the client id, a lowercase UUID with dashes, stored as 16 bytes
KIND_HOPS = 8  # the message came through pushes (hops > 0): a byte holds how many
MAX_HOPS = push_hops.MAX_KEPT  # what the hops byte holds
MAX_CLAIM_COUNT = 2 ** (8 * struct.calcsize(">H")) - 1  # the head's claim-count field

# What a script answers when a change to a message is refused by its claim (lib.lua's
# claim_check): a live claim holds it and the caller named none or another live one; the
# caller named a claim but none holds the message; the named claim does not exist or expired.
REFUSED_CLAIMED = "claimed"
REFUSED_NOT_CLAIMED = "not_claimed"
REFUSED_BAD_CLAIM = "bad_claim"

# What edit.lua answers besides a claim refusal: no such unexpired message; a new ttl that,
# counted from the message's creation, has already run out (nothing is written).
EDIT_MISSING = "missing"
EDIT_TTL_LAPSED = "lapsed"

# What push.lua's settle does with an attempt beyond its outcome: nothing more; delete its
# message (consumed: a delivered push of a queue with _delete_after_push) once no other
# subscription is owed it; count no attempt (given back unsent).
SETTLE_PLAIN = 0
SETTLE_CONSUME = 1
SETTLE_UNSENT = 2

# Lua's struct module names unsigned fields by their size.
_LUA_STRUCT_CODES = {"Q": "I8", "I": "I4", "H": "I2", "B": "B"}


def lua_struct_format(layout: struct.Struct) -> str:
    """``layout``'s format as Lua's ``struct.pack`` spells it."""
    byte_order, codes = layout.format[0], layout.format[1:]
    return byte_order + "".join(_LUA_STRUCT_CODES[code] for code in codes)


def _lua_string(value: str) -> str:
    assert "'" not in value and "\\" not in value
    return f"'{value}'"


def constants() -> dict[str, str]:
    """Each shared fact as a Lua name and its Lua literal, in prelude order."""
    keys = {
        f"K_{field.name.upper()}": f"KEYS[{position}]"
        for position, field in enumerate(dataclasses.fields(QueueKeys), start=1)
    }
    return {
        **keys,
        "QUEUE_KEYS": str(len(keys)),
        "QUEUE_SUFFIX": _lua_string(QUEUE_SUFFIX),
        "TRASH_SUFFIX": _lua_string(TRASH_SUFFIX),
        "TRASH_INDEXES_SUFFIX": _lua_string(TRASH_INDEXES_SUFFIX),
        "BUCKET_SIZE": str(BUCKET_SIZE),
        "SWEEP_BUCKETS": str(SWEEP_BUCKETS),
        "SWEEP_ENTRIES": str(SWEEP_ENTRIES),
        "UNLINK_INDEXES": _lua_string(UNLINK_INDEXES),
        "RECORD_HEAD": _lua_string(lua_struct_format(RECORD_HEAD)),
        "ID_RANDOM_BYTES": str(ID_RANDOM_BYTES),
        "KIND_CLIENT_PACKED": str(KIND_CLIENT_PACKED),
        "KIND_ID_KEPT": str(KIND_ID_KEPT),
        "KIND_CLIENT_DASHED": str(KIND_CLIENT_DASHED),
        "KIND_HOPS": str(KIND_HOPS),
        "MAX_HOPS": str(MAX_HOPS),
        "MAX_CLAIM_COUNT": str(MAX_CLAIM_COUNT),
        "PARKED": str(PARKED),
        "SCAN_EXTRA": str(bounds.SCAN_EXTRA),
        "ANY_METADATA_VERSION": _lua_string(ANY_METADATA_VERSION),
        "REFUSED_CLAIMED": _lua_string(REFUSED_CLAIMED),
        "REFUSED_NOT_CLAIMED": _lua_string(REFUSED_NOT_CLAIMED),
        "REFUSED_BAD_CLAIM": _lua_string(REFUSED_BAD_CLAIM),
        "EDIT_MISSING": _lua_string(EDIT_MISSING),
        "EDIT_TTL_LAPSED": _lua_string(EDIT_TTL_LAPSED),
        "SETTLE_CONSUME": str(SETTLE_CONSUME),
        "SETTLE_UNSENT": str(SETTLE_UNSENT),
        "P_RETRY_BACKOFF": _lua_string(policy.RETRY_BACKOFF),
        "P_MAX_CLAIM_COUNT": _lua_string(policy.MAX_CLAIM_COUNT),
        "P_DEAD_LETTER_QUEUE": _lua_string(policy.DEAD_LETTER_QUEUE),
        "P_DEAD_LETTER_QUEUE_MESSAGES_TTL": _lua_string(policy.DEAD_LETTER_QUEUE_MESSAGES_TTL),
        "O_MAX_DISPATCHES_PER_SECOND": _lua_string(limits.MAX_DISPATCHES_PER_SECOND),
        "O_MAX_CONCURRENT_DISPATCHES": _lua_string(limits.MAX_CONCURRENT_DISPATCHES),
    }


def prelude() -> str:
    """The shared facts as top-level Lua ``local`` statements, one per line (the form lib.lua's
    statements take, so a script carries only the ones it uses)."""
    return "".join(f"local {name} = {value}\n" for name, value in constants().items())
