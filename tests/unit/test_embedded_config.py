"""How much memory the embedded store may hold (``storage/redis/embedded_config.py``)."""

from __future__ import annotations

import os
from pathlib import Path

from zaqar_delay.storage.redis.embedded_config import (
    MIB,
    machine_memory_bytes,
    max_memory_bytes,
    memory_config,
)

PHYSICAL = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def test_a_control_group_s_lower_limit_is_the_machine_s_memory(tmp_path: Path) -> None:
    v2, v1 = tmp_path / "memory.max", tmp_path / "memory.limit_in_bytes"
    v2.write_text("1073741824\n")
    assert machine_memory_bytes((str(v2),)) == min(PHYSICAL, 1 << 30)
    # No limit ("max", or v1's huge number) and no control group leave the machine's.
    v2.write_text("max\n")
    v1.write_text(f"{PHYSICAL * 4}\n")
    assert machine_memory_bytes((str(v2), str(v1))) == PHYSICAL
    assert machine_memory_bytes((str(tmp_path / "absent"),)) == PHYSICAL
    v1.write_text("536870912\n")
    assert machine_memory_bytes((str(v2), str(v1))) == min(PHYSICAL, 1 << 29)


def test_the_setting_in_mib_zero_for_none_unset_for_half_the_machine() -> None:
    assert max_memory_bytes(0) == 0
    assert max_memory_bytes(3) == 3 * MIB == 3_145_728
    assert max_memory_bytes(None) == machine_memory_bytes() // 2 > 0
    assert memory_config(5) == {"maxmemory": "5", "maxmemory-policy": "noeviction"}
