"""The push dispatcher reaches the stores only through the service's push calls: the import
contracts (pyproject.toml) keep ``zaqar_delay.push`` from importing a store, and this keeps
it from reaching one through the service's ``stores`` attribute."""

from __future__ import annotations

import ast
import pathlib

import zaqar_delay.push

PUSH = pathlib.Path(zaqar_delay.push.__file__).parent


def stores_reached(path: pathlib.Path) -> list[int]:
    """The lines of ``path`` that read an attribute named ``stores``."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and node.attr == "stores"
    ]


def test_the_push_package_never_holds_a_store() -> None:
    modules = sorted(PUSH.glob("*.py"))
    assert any(path.name == "dispatcher.py" for path in modules)
    reached = {path.name: lines for path in modules if (lines := stores_reached(path))}
    assert reached == {}
