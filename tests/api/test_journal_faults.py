"""A lifecycle journal whose disk refuses writes (a small tmpfs, filled) fails no request:
the store did what the request asked, and the journal only reports it."""

from __future__ import annotations

import glob
import json
import logging
import os
import pathlib
from collections.abc import Iterator

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.api import Api, api_on
from tests.helpers.small_disk import fill, grow, small_tmpfs
from zaqar_delay.conf import JournalSettings


@pytest.fixture
def journal_disk() -> Iterator[str]:
    with small_tmpfs("256k") as mount_point:
        yield mount_point


@pytest.fixture
def journaled(request: pytest.FixtureRequest, journal_disk: str) -> Iterator[Api]:
    yield from api_on(request, "embedded", journal=JournalSettings(path=journal_disk))


def journal_lost(api: Api) -> float:
    result = api.get("/metrics", headers={"Client-ID": None, "X-Project-ID": None})
    assert result.status_code == 200
    for family in text_string_to_metric_families(result.text):
        for sample in family.samples:
            if sample.name == "zaqar_delay_journal_lost_events_total":
                return sample.value
    raise AssertionError("no zaqar_delay_journal_lost_events_total in /metrics")


def journaled_ids(directory: str, event: str) -> set[str]:
    found = set()
    for path in glob.glob(os.path.join(directory, "*.jsonl")):
        for line in pathlib.Path(path).read_text(encoding="ascii").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line the full disk cut short
            if record["event"] == event:
                found.add(record["message_id"])
    return found


def test_a_full_journal_disk_fails_no_request_and_the_journal_resumes(
    journaled: Api, journal_disk: str, caplog: pytest.LogCaptureFixture
) -> None:
    api = journaled
    api.post_messages("q", {"body": "before"})
    assert journal_lost(api) == 0
    fill(journal_disk)

    with caplog.at_level(logging.WARNING, logger="zaqar_delay.journal"):
        # More lines than the room left in the journal file's last page: a part is written,
        # then the disk refuses the rest.
        posted = api.post_messages("q", *({"body": n} for n in range(50)))
        claimed = api.post("/v2/queues/q/claims", params={"limit": 2})
        assert claimed.status_code == 201, claimed.text
        assert len(claimed.json["messages"]) == 2
        # A pop deletes before it answers: failing it would lose the messages it took.
        popped = api.delete("/v2/queues/q/messages", params={"pop": 3})
        assert popped.status_code == 200, popped.text
        assert len(popped.json["messages"]) == 3
    assert len(posted) == 50
    written = set(posted) & journaled_ids(journal_disk, "posted")
    assert len(written) < 50, "the disk refused no journal write"
    # posted, claimed, popped (claimed and deleted): each event not written is counted.
    assert journal_lost(api) == 50 + 2 + 3 + 3 - len(written)
    warnings = [r for r in caplog.records if "lost" in r.getMessage()]
    assert len(warnings) == 1, "warned once, not at each write"

    grow("4m", journal_disk)
    [after] = api.post_messages("q", {"body": "after"})
    assert after in journaled_ids(journal_disk, "posted")
