"""The names of a schedule's queues read back one way (``schedules/names.py``), whatever the
schedule's or the target's name, a topic's included."""

from __future__ import annotations

import pytest

from zaqar_delay import topics
from zaqar_delay.schedules import names
from zaqar_delay.schedules.names import Parsed


@pytest.mark.parametrize("target", ["jobs", "s", topics.stored("alerts"), topics.stored("s")])
@pytest.mark.parametrize("name", ["nightly", "s", "a.b-c_d"])
def test_each_name_parses_back(target: str, name: str) -> None:
    assert names.parse(names.tick_queue(target)) == Parsed(target, "", "ticks")
    assert names.parse(names.definition_queue(target, name)) == Parsed(target, name, "definition")
    assert names.parse(names.state_queue(target, name)) == Parsed(target, name, "state")
    assert names.parse(names.error_queue(target, name)) == Parsed(target, name, "error")
    assert names.schedule_of(names.definition_queue(target, name), target) == name
    assert names.schedule_of(names.state_queue(target, name), target) is None
    assert names.schedule_of(names.error_queue(target, name), target) is None
    assert topics.is_internal(names.definition_queue(target, name))
    assert not topics.is_topic(names.definition_queue(target, name))


@pytest.mark.parametrize(
    "stored", ["jobs", "~jobs", "~~", "~~~", "~~jobs~a~b", "~~jobs~a~s~s", "~~jobs~a~e~e"]
)
def test_other_names_are_not_schedule_queues(stored: str) -> None:
    assert names.parse(stored) is None


def test_a_target_s_schedule_queues_sort_together_after_its_tick_queue() -> None:
    stored = sorted(
        [
            names.definition_queue("jobs", "b"),
            names.state_queue("jobs", "a"),
            names.error_queue("jobs", "b"),
            names.tick_queue("jobs"),
            names.definition_queue("jobs", "a"),
            names.definition_queue("jobsx", "a"),
        ]
    )
    own = [s for s in stored if s.startswith(names.prefix("jobs"))]
    first = stored.index(own[0])
    assert stored[first : first + len(own)] == own  # one run of the order
    assert own[0] == names.tick_queue("jobs") and len(own) == 5
