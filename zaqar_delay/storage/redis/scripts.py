"""Loads the Lua scripts of the driver, each prefixed with the shared ``lib.lua``."""

from __future__ import annotations

from importlib import resources
from typing import Any

from redis.commands.core import Script

SCRIPT_NAMES = (
    "post",
    "list",
    "list_due",
    "get",
    "claim",
    "get_claim",
    "renew_claim",
    "release_claim",
    "delete",
    "reschedule",
    "delete_many",
    "pop",
    "stats",
    "queue",
    "next_claimable",
    "subscription",
    "push",
    "upgrade",
)


def script_source(name: str) -> str:
    """The full text sent to Redis for script ``name``: lib.lua, then the script."""
    lua = resources.files(__package__).joinpath("lua")
    return lua.joinpath("lib.lua").read_text() + "\n" + lua.joinpath(f"{name}.lua").read_text()


def register_scripts(client: Any) -> dict[str, Script]:
    """Register every script with ``client`` (EVALSHA, loading on first use or after a flush)."""
    return {name: client.register_script(script_source(name)) for name in SCRIPT_NAMES}
