"""``[metrics]``: Prometheus metrics."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import option, options


@options("metrics")
@dataclasses.dataclass(frozen=True, slots=True)
class MetricsSettings:
    """Prometheus metrics: ``[metrics]``."""

    max_queue_series: int = option(
        cfg.IntOpt,
        default=100,
        min=0,
        help=(
            "Queues that get /metrics series of their own (messages posted, claimed, "
            "deleted, dead-lettered; delayed and claimed counts), per server process: the "
            'first ones it sees. Every later queue is counted under project="_other", '
            'queue="_other", so a scrape stays small with any number of queues. 0 counts '
            "every queue there. Service-wide series are always shown."
        ),
    )
