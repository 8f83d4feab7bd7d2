"""No module of the package is over 400 lines: a module that grows past it holds more than
one responsibility, and is split (the design document's module table names each part)."""

from __future__ import annotations

from pathlib import Path

import zaqar_delay

PACKAGE = Path(zaqar_delay.__file__).parent
MAX_LINES = 400


def lines_of(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def test_no_module_of_the_package_is_over_400_lines() -> None:
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 100
    over = {str(p.relative_to(PACKAGE)): n for p in modules if (n := lines_of(p)) > MAX_LINES}
    assert over == {}


def test_the_count_sees_a_long_module(tmp_path: Path) -> None:
    module = tmp_path / "long.py"
    module.write_text("x = 1\n" * (MAX_LINES + 1))
    assert lines_of(module) == MAX_LINES + 1
