"""Where test code lives: the servers tests and benchmarks start in ``testbed``, the helpers
the suites share in ``tests.helpers``, fixtures in conftest files; nothing imports a test
module or a conftest file."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def imported_modules(path: Path) -> set[str]:
    """The first-party test modules ``path`` imports (``tests.*`` and ``testbed.*``)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            found.update(n for n in names if n.split(".")[0] in ("tests", "testbed"))
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] in ("tests", "testbed"))
    return found


def misplaced(folder: str, allowed: tuple[str, ...]) -> dict[str, list[str]]:
    """Each file under ``folder`` importing a test module outside the ``allowed`` prefixes."""
    wrong = {}
    for path in sorted((ROOT / folder).rglob("*.py")):
        bad = sorted(
            module
            for module in imported_modules(path)
            if module not in ("tests", "testbed") and not module.startswith(allowed)
        )
        if bad:
            wrong[str(path.relative_to(ROOT))] = bad
    return wrong


def test_the_suites_import_only_helpers_and_servers() -> None:
    assert misplaced("tests", ("tests.helpers", "testbed")) == {}


def test_benchmarks_import_only_helpers_and_servers() -> None:
    assert misplaced("benchmarks", ("tests.helpers", "testbed", "benchmarks")) == {}


def test_the_servers_need_no_test_code() -> None:
    assert misplaced("testbed", ("testbed",)) == {}


def test_the_check_sees_an_import_of_a_test_module(tmp_path: Path) -> None:
    module = tmp_path / "test_example.py"
    module.write_text(
        "from tests.api.test_queues import x\nimport tests.conftest\nfrom tests.helpers import api\n"
    )
    assert imported_modules(module) >= {"tests.api.test_queues", "tests.conftest"}
