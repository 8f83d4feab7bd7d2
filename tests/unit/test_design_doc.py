"""The design document names what the stores hold: every Redis key of a queue, every Lua
script and every MongoDB collection. A new one without its description fails here."""

from __future__ import annotations

import dataclasses
import importlib
from importlib import resources
from pathlib import Path
from typing import Any

from zaqar_delay.storage.mongodb.schema import INDEXES
from zaqar_delay.storage.redis.keys import KeySpace, QueueKeys

DESIGN = (Path(__file__).resolve().parents[2] / "doc" / "source" / "design.rst").read_text()


def test_every_redis_key_of_a_queue_is_described_with_its_suffix() -> None:
    keys = KeySpace("zd").queue("p", "q")
    for field in dataclasses.fields(QueueKeys):
        suffix = getattr(keys, field.name).rsplit("}:", 1)[1]
        assert f"{field.name} (``{suffix}" in DESIGN, field.name


def test_every_lua_script_is_named() -> None:
    scripts = resources.files("zaqar_delay.storage.redis").joinpath("lua")
    names = [p.name[: -len(".lua")] for p in scripts.iterdir() if p.name.endswith(".lua")]
    assert "claim" in names
    for name in names:
        assert f"``{name}``" in DESIGN or f"``{name}.lua``" in DESIGN, name


def test_every_mongodb_collection_is_described() -> None:
    for collection in INDEXES:
        assert f"``{collection}``" in DESIGN, collection


def test_every_swift_container_is_described() -> None:
    from zaqar_delay.storage.swift.names import CONTAINERS

    for kind in CONTAINERS:
        assert f"``<ns>_{kind}``" in DESIGN, kind


def test_every_protocol_written_once_names_its_storage_port() -> None:
    """The protocols MongoDB and Swift share are written once over a port each store
    implements; the design document names each port."""
    from zaqar_delay.storage import (
        dedup_reservation,
        push_leasing,
        push_settlement,
        rate_reservation,
    )

    ports = (
        dedup_reservation.DedupRecords,
        push_leasing.LeaseWrites,
        push_settlement.SettleWrites,
        rate_reservation.RateCell,
    )
    for port in ports:
        assert f"``{port.__name__}``" in DESIGN, port.__name__


def test_every_option_group_module_is_named() -> None:
    conf = resources.files("zaqar_delay.conf")
    modules = [p.name[: -len(".py")] for p in conf.iterdir() if p.name.endswith(".py")]
    groups = set(modules) - {"__init__", "options", "settings", "environment"}
    assert {"server", "storage", "transport", "notification"} <= groups
    for module in groups:
        assert f"``{module}``" in DESIGN, module


def lifecycle_row(transition: Any) -> str:
    """How the design document states a transition of the Swift life cycle's table."""
    sources = ", ".join(s.name for s in transition.sources) or "(nothing)"
    targets = " or ".join(t.name for t in transition.targets)
    step = f"``{transition.step}``" if transition.step else "the clock"
    return f"``{transition.name}``: {sources} → {targets}, by {step}."


def test_the_swift_life_cycle_table_is_reproduced_and_each_step_exists() -> None:
    """Each transition of ``storage/swift/lifecycle.py`` is in the design document, with
    its writes and what a stop leaves, and names a function the driver has."""
    from zaqar_delay.storage.swift import lifecycle

    text = " ".join(DESIGN.split())
    for transition in lifecycle.TRANSITIONS:
        assert lifecycle_row(transition) in text, transition.name
        assert " ".join(f"Writes: {transition.writes}.".split()) in text, transition.name
        assert " ".join(f"A stop: {transition.finish}.".split()) in text, transition.name
        if transition.step:
            module, cls, function = transition.step.split(".")
            owner = getattr(importlib.import_module(f"zaqar_delay.storage.swift.{module}"), cls)
            assert callable(getattr(owner, function)), transition.step
    for state in lifecycle.State:
        assert f"``{state.name}``" in DESIGN, state.name


def test_the_import_contracts_are_described() -> None:
    """The design document states each import contract of ``pyproject.toml``: the client
    libraries only drivers import (and which Swift modules import ``swiftclient``), and every
    import still allowed across the service's door."""
    import tomllib

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    assert len(contracts) == 3
    for contract in contracts:
        for module in contract["forbidden_modules"]:
            named = module.removeprefix("zaqar_delay.")
            assert f"``{named}``" in DESIGN, (contract["name"], module)
        for ignored in contract.get("ignore_imports", []):
            importer = ignored.split(" -> ")[0].removeprefix("zaqar_delay.")
            if importer.endswith(".**"):
                shown = "storage/" + importer.split(".")[1] + "/"
            elif importer.startswith("storage."):
                shown = importer.replace(".", "/") + ".py"
            else:
                shown = importer
            assert f"``{shown}``" in DESIGN, (contract["name"], ignored)
