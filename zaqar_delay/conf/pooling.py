"""Zaqar's ``[pooling:catalog]``: the catalog of a pooled service."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import option, options


@options("pooling:catalog")
@dataclasses.dataclass(frozen=True, slots=True)
class CatalogSettings:
    """The pool catalog: Zaqar's ``[pooling:catalog]`` options."""

    enable_virtual_pool: bool = option(
        cfg.BoolOpt,
        default=False,
        help=(
            "With pooling: while no pool is registered, queues are placed on [storage] uri "
            "itself (the pool named 'default'), so a fresh deployment works before an admin "
            "registers one."
        ),
    )
    refresh: float = option(
        cfg.FloatOpt,
        name="catalog_refresh",
        default=1.0,
        min=0.01,
        help=(
            "Seconds between a process's checks that the placements it cached still hold "
            "(one read of the catalog's generation). A pool's deletion waits this long twice "
            "before it is final, so no process still writes to it."
        ),
    )
