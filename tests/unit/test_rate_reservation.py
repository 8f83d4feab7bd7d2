"""The rate's slots and send times (``storage.rate_reservation``), over an in-memory cell:
what MongoDB and Swift store, without the store."""

from __future__ import annotations

import dataclasses

from zaqar_delay.storage.bounds import RATE_ATTEMPTS
from zaqar_delay.storage.rate_reservation import RateRequest, RateState, RateTime, take

INTERVAL_MS = 250.0


@dataclasses.dataclass
class Cell:
    """A rate in memory, its version a write counter; ``lose`` writes fail as if another
    dispatcher wrote first."""

    state: RateState | None = None
    version: int = 0
    lose: int = 0
    writes: int = 0

    def read(self) -> tuple[RateState | None, object]:
        return self.state, self.version

    def replace(self, version: object, state: RateState) -> bool:
        if self.lose:
            self.lose -= 1
            self.version += 1
            return False
        assert version == self.version
        self.state, self.version, self.writes = state, self.version + 1, self.writes + 1
        return True


def fresh(owed_ms: int, now_ms: int, until_ms: int | None = None) -> RateRequest:
    return RateRequest(None, owed_ms, now_ms, now_ms if until_ms is None else until_ms, 250.0)


def held(slot_ms: int, now_ms: int, until_ms: int | None = None) -> RateRequest:
    return RateRequest(
        slot_ms, slot_ms, now_ms, now_ms if until_ms is None else until_ms, INTERVAL_MS
    )


def test_a_backlog_takes_the_slots_one_interval_apart_from_now() -> None:
    cell = Cell()
    assert take(cell, fresh(0, 10_000)) == RateTime(10_000, 10_000)
    assert take(cell, fresh(0, 10_000)) == RateTime(10_250, 10_250)
    assert take(cell, fresh(0, 10_000)) == RateTime(10_500, 10_500)
    assert cell.state == RateState(10_750, 0, 10_000)


def test_a_slot_whose_time_passed_is_sent_now_and_the_later_slots_move_on() -> None:
    cell = Cell()
    take(cell, fresh(0, 0))
    second, third = take(cell, fresh(0, 0)), take(cell, fresh(0, 0))
    assert second == RateTime(250, 250) and third == RateTime(500, 500)
    # No dispatcher ran for ten seconds.
    assert cell.state is not None and cell.state.offset_ms == 0
    assert take(cell, held(250, 10_000)) == RateTime(10_000, 250)
    assert take(cell, held(500, 10_000)) == RateTime(10_250, 500)
    assert take(cell, fresh(0, 10_000)) == RateTime(10_500, 750)


def test_a_push_sent_after_one_holding_a_later_slot_comes_an_interval_after_it() -> None:
    cell = Cell()
    assert take(cell, fresh(0, 0)) == RateTime(0, 0)
    assert take(cell, fresh(0, 0)) == RateTime(250, 250)  # owed again at 250
    # Its push waits for a request place until 1000, when a push that waited for one
    # without a slot takes the next (1000) and is sent.
    assert take(cell, fresh(0, 1_000)) == RateTime(1_000, 1_000)
    # Slot 250 comes an interval after that send, and the slots after it move on with it.
    assert take(cell, held(250, 1_000, until_ms=1_100)) == RateTime(1_250, 250)
    assert cell.state == RateState(1_250, 1_000, 1_000)
    assert take(cell, fresh(0, 1_250)) == RateTime(2_250, 1_250)


def test_a_time_past_the_lease_is_not_a_send() -> None:
    cell = Cell()
    take(cell, fresh(0, 0))
    later = take(cell, fresh(0, 0))
    assert later == RateTime(250, 250)
    assert cell.state is not None and cell.state.last_ms == 0
    writes = cell.writes
    # Looked at again before its time: nothing to write.
    assert take(cell, held(250, 100)) == RateTime(250, 250)
    assert cell.writes == writes


def test_a_rate_that_others_keep_changing_gives_no_time() -> None:
    cell = Cell(lose=RATE_ATTEMPTS)
    assert take(cell, fresh(0, 0)) is None
    assert cell.state is None
    cell.lose = RATE_ATTEMPTS - 1
    assert take(cell, fresh(0, 0)) == RateTime(0, 0)
