"""``[journal]``: the lifecycle journal's files."""

from __future__ import annotations

import dataclasses

from oslo_config import cfg

from zaqar_delay.conf.options import mib, option, options


@options("journal")
@dataclasses.dataclass(frozen=True, slots=True)
class JournalSettings:
    """The lifecycle journal: ``[journal]``."""

    path: str = option(
        cfg.StrOpt,
        default="",
        help=(
            "Directory of the lifecycle journal: one JSON line per message event (posted, "
            "claimed, deleted, released, rescheduled, edited, dead_lettered, pushed), in files "
            "of each server process (journal-<host>-<pid>-<start>-<n>.jsonl), read by "
            "zaqar-delay-pipeline report. Empty (the default) turns the journal off. Old files "
            "are removed only past max_total_size."
        ),
    )
    max_bytes: int = option(
        cfg.IntOpt,
        name="max_file_size",
        default=64,
        min=1,
        help="Size in MiB after which a journal file is closed and the next one begun.",
        convert=mib,
    )
    max_total: int = option(
        cfg.IntOpt,
        name="max_total_size",
        default=0,
        min=0,
        convert=mib,
        help="Most MiB the journal directory's files may take: a process that begins a new "
        "file deletes the oldest files no process writes any more until the rest fit (the "
        "newest file of each live process, or of one on another host, is kept). 0 (the "
        "default): every file is kept, for the operator to remove.",
    )
