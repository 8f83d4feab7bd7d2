"""Which Redis replies are outages (503, retried by clients) and which are bugs (500), as
redis-py's own reply parser hands them to the driver."""

from __future__ import annotations

import pytest
from redis._parsers.base import BaseParser

from zaqar_delay.storage.redis.errors import is_transient


@pytest.mark.parametrize(
    "reply",
    [
        "TRYAGAIN Multiple keys request during rehashing of slot",
        "READONLY You can't write against a read only replica.",
        "OOM command not allowed when used memory > 'maxmemory'.",
        "CLUSTERDOWN The cluster is down",
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        "LOADING Redis is loading the dataset in memory",
        "BUSY Redis is busy running a script.",
        "MISCONF Redis is configured to save RDB snapshots, but it's unable to persist.",
        "NOREPLICAS Not enough good replicas to write.",
        "ASK 3999 127.0.0.1:6381",
        "MOVED 3999 127.0.0.1:6381",
        # A command refused inside a script comes back wrapped.
        "ERR Error running script (call to f_0): @user_script:1: @user_script: 1: -READONLY "
        "You can't write against a read only replica.",
    ],
)
def test_a_reply_meaning_not_now_is_an_outage(reply: str) -> None:
    error = BaseParser.parse_error(reply)
    assert is_transient(error), type(error).__name__


@pytest.mark.parametrize(
    "reply",
    [
        "ERR wrong number of arguments for 'evalsha' command",
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        "NOSCRIPT No matching script. Please use EVAL.",
        "ERR Error running script (call to f_0): @user_script:12: user_script:12: "
        "attempt to compare nil with number",
    ],
)
def test_a_reply_meaning_wrong_is_not_an_outage(reply: str) -> None:
    assert not is_transient(BaseParser.parse_error(reply))
