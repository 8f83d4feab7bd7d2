"""The lifecycle journal, written by the API on both drivers."""

from __future__ import annotations

import glob
import json
import multiprocessing
import os
import pathlib
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from testbed.receiver import receiver
from tests.helpers.api import Api, api_on
from tests.helpers.push import dispatching, subscribe
from zaqar_delay import errors
from zaqar_delay.conf import JournalSettings
from zaqar_delay.journal import Journal, NullJournal, open_journal
from zaqar_delay.models import MessageEdit, Posted

P = "project-1"


@pytest.fixture(params=["embedded", "mongodb"])
def journaled(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Api]:
    yield from api_on(
        request, request.param, journal=JournalSettings(path=str(tmp_path / "journal"))
    )


def events(directory: pathlib.Path) -> list[dict[str, Any]]:
    lines: list[dict[str, Any]] = []
    for path in sorted(glob.glob(str(directory / "*.jsonl"))):
        with open(path, encoding="ascii") as handle:
            lines += [json.loads(line) for line in handle]
    return lines


def claim_id_of(result: Any) -> str:
    return str(result.headers["Location"].rsplit("/", 1)[1])


def test_every_lifecycle_event_is_one_line(journaled: Api, tmp_path: pathlib.Path) -> None:
    api = journaled
    t0 = api.clock.now_ms()
    [now, later] = api.post_messages(
        "q", {"body": 1, "ttl": 120}, {"body": 2, "deliver_at": t0 + 5000, "dedup_id": "d"}
    )
    # A post of a remembered dedup id: a repeat line, which names the message stored first.
    assert api.post_messages("q", {"body": 2, "dedup_id": "d"}) == [later]
    api.clock.advance(1)
    first = api.post("/v2/queues/q/claims", params={"limit": 1})
    claim = claim_id_of(first)
    api.clock.advance(1)
    api.delete(f"/v2/queues/q/claims/{claim}")  # releases `now`
    api.clock.advance(1)
    second = api.post("/v2/queues/q/claims", params={"limit": 1})
    claim2 = claim_id_of(second)
    api.delete(f"/v2/queues/q/messages/{now}", params={"claim_id": claim2})
    api.patch(f"/v2/queues/q/messages/{later}", json={"delay": 60})
    api.clock.advance(60)
    popped = api.delete("/v2/queues/q/messages", params={"pop": 1})
    assert [m["id"] for m in popped.json["messages"]] == [later]
    # A delete of a message already gone (here, popped): a repeat line.
    assert api.delete(f"/v2/queues/q/messages/{later}").status_code == 204

    base = {"project": P, "queue": "q"}
    assert events(tmp_path / "journal") == [
        {**base, "ts": t0, "event": "posted", "message_id": now, "due": t0, "ttl": 120},
        {**base, "ts": t0, "event": "posted", "message_id": later, "due": t0 + 5000, "ttl": 3600},
        {**base, "ts": t0, "event": "posted", "message_id": later, "repeat": True},
        {
            **base,
            "ts": t0 + 1000,
            "event": "claimed",
            "message_id": now,
            "claim_id": claim,
            "claim_count": 1,
            "due": t0,
        },
        {**base, "ts": t0 + 2000, "event": "released", "message_id": now, "claim_id": claim},
        {
            **base,
            "ts": t0 + 3000,
            "event": "claimed",
            "message_id": now,
            "claim_id": claim2,
            "claim_count": 2,
            "due": t0,
        },
        {**base, "ts": t0 + 3000, "event": "deleted", "message_id": now, "claim_id": claim2},
        {
            **base,
            "ts": t0 + 3000,
            "event": "rescheduled",
            "message_id": later,
            "claim_id": None,
            "due": t0 + 63000,
        },
        {
            **base,
            "ts": t0 + 63000,
            "event": "claimed",
            "message_id": later,
            "claim_id": None,
            "claim_count": 1,
            "due": t0 + 63000,
        },
        {**base, "ts": t0 + 63000, "event": "deleted", "message_id": later, "claim_id": None},
        {
            **base,
            "ts": t0 + 63000,
            "event": "deleted",
            "message_id": later,
            "claim_id": None,
            "repeat": True,
        },
    ]


def losing_the_first_stored_post_answer(
    api: Api, queue: str, monkeypatch: pytest.MonkeyPatch
) -> list[str]:
    """Make the first post ``queue``'s store stores answer with an error, as when replicas
    did not confirm it in time: the ids it stored are put in the list returned (the fault's
    evidence), and later posts are answered as usual."""
    store, lost = api.store(queue), []
    post = store.post_if_current

    def stored_then_lost(*args: Any) -> Any:
        outcome = post(*args)
        if lost or not isinstance(outcome, Posted):  # a metadata check stores nothing
            return outcome
        lost.extend(outcome.ids)
        raise errors.WriteNotReplicated("no replica confirmed it in time")

    monkeypatch.setattr(store, "post_if_current", stored_then_lost)
    return lost


def test_a_post_whose_answer_was_lost_is_journaled_by_its_retry(
    journaled: Api, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store stores a post and its answer is lost (replicas did not confirm in time): the
    request fails, so nothing is journaled, and the client's retry with the same dedup ids
    matches them and stores nothing. Its lines, repeats, are all the journal has of them."""
    api = journaled
    lost = losing_the_first_stored_post_answer(api, "q", monkeypatch)
    messages = [{"body": 1, "dedup_id": "a"}, {"body": 2, "dedup_id": "b", "delay": 30}]
    answer = api.post("/v2/queues/q/messages", json={"messages": messages})
    assert answer.status_code == 503, answer.text
    # The fault: both messages are stored, and the journal has no line of them.
    listed = api.get("/v2/queues/q/messages", params={"echo": "true", "include_delayed": "true"})
    stored = [m["id"] for m in listed.json["messages"]]
    assert len(stored) == 2 and sorted(stored) == sorted(lost), listed.json
    assert events(tmp_path / "journal") == []

    t1 = api.clock.now_ms()
    assert api.post_messages("q", *messages) == stored
    base = {"ts": t1, "event": "posted", "project": P, "queue": "q", "repeat": True}
    assert events(tmp_path / "journal") == [{**base, "message_id": m} for m in stored]


def test_a_fire_whose_post_answer_was_lost_is_journaled_by_its_retry(
    journaled: Api, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A schedule's fire whose post was stored and answered with an error is retried; the
    retry's post matches the first one's dedup id, and its lines, repeats, are the only ones
    of that message. The fire counts once."""
    api = journaled
    document = {"every": 60, "message": {"body": "n", "ttl": 900}}
    assert api.put("/v2/queues/q/schedules/s", json=document).status_code == 201
    lost = losing_the_first_stored_post_answer(api, "q", monkeypatch)
    journal = tmp_path / "journal"
    with dispatching(api) as dispatcher:
        api.clock.advance(ms=60_000)
        dispatcher.run_once()
        listed = api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"]
        # The fault: the message is stored, the fire failed, and no line names the message.
        assert [m["id"] for m in listed] == lost and len(lost) == 1
        assert api.get("/v2/queues/q/schedules/s").json["fires"] == 0
        assert [e for e in events(journal) if e["queue"] == "q"] == []
        api.clock.advance(ms=10_000)  # the tick's lease is over: it is fired again
        dispatcher.run_once()
    assert api.get("/v2/queues/q/schedules/s").json["fires"] == 1
    slot = api.clock.now_ms() - 10_000
    lines = [e for e in events(journal) if e["queue"] == "q"]
    common = {"project": P, "queue": "q", "message_id": lost[0], "repeat": True}
    fired = {"schedule": "s", "slot": slot, "delay": 0}
    assert [{k: v for k, v in e.items() if k != "ts"} for e in lines] == [
        {**common, "event": "posted"},
        {**common, "event": "scheduled", **fired},
    ]


def deleted_counted(api: Api) -> dict[str, float]:
    """``zaqar_delay_messages_deleted_total`` on /metrics, by queue (those with a sample)."""
    result = api.get("/metrics", headers={"Client-ID": None, "X-Project-ID": None})
    assert result.status_code == 200
    return {
        sample.labels["queue"]: sample.value
        for family in text_string_to_metric_families(result.text)
        for sample in family.samples
        if sample.name == "zaqar_delay_messages_deleted_total"
    }


def test_a_delete_of_messages_already_gone_is_journaled_as_repeats_and_not_counted(
    journaled: Api, tmp_path: pathlib.Path
) -> None:
    """Deletes are idempotent: a retried delete, a delete of a popped message or of an id
    never posted answers 204 as the first. Its lines are repeats (the report counts each
    message's delete once), and /metrics counts only the messages a delete removed."""
    api = journaled
    [a, b] = api.post_messages("q", {"body": 1}, {"body": 2})
    bulk = {"ids": f"{a},{b},{a}"}
    assert api.delete("/v2/queues/q/messages", params=bulk).status_code == 204
    assert deleted_counted(api) == {"q": 2}
    assert api.delete("/v2/queues/q/messages", params=bulk).status_code == 204
    assert api.delete(f"/v2/queues/q/messages/{a}").status_code == 204
    assert api.delete(f"/v2/queues/nowhere/messages/{a}").status_code == 204
    assert deleted_counted(api) == {"q": 2}  # and no series for a delete of nothing
    lines = [
        (e["event"], e["queue"], e["message_id"], e.get("repeat", False))
        for e in events(tmp_path / "journal")
    ]
    assert lines == [
        ("posted", "q", a, False),
        ("posted", "q", b, False),
        ("deleted", "q", a, False),
        ("deleted", "q", b, False),
        ("deleted", "q", a, True),
        ("deleted", "q", b, True),
        ("deleted", "q", a, True),
        ("deleted", "nowhere", a, True),
    ]


def test_a_delete_whose_answer_was_lost_is_journaled_by_its_retry(
    journaled: Api, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store removes the messages and the answer is lost (replicas did not confirm in
    time): the request fails and journals nothing; the client's retry finds them gone, and
    its lines, repeats, are all the journal has of their delete."""
    api = journaled
    [a, b] = api.post_messages("q", {"body": 1}, {"body": 2})
    store, removed = api.store("q"), []
    delete = store.delete_messages

    def removed_then_lost(*args: Any) -> Any:
        if removed:
            return delete(*args)
        removed.extend(delete(*args))
        raise errors.WriteNotReplicated("no replica confirmed it in time")

    monkeypatch.setattr(store, "delete_messages", removed_then_lost)
    answer = api.delete("/v2/queues/q/messages", params={"ids": f"{a},{b}"})
    assert answer.status_code == 503, answer.text
    # The fault: both messages are gone, and the journal has no line of their delete.
    assert removed == [a, b]
    assert api.get("/v2/queues/q/messages", params={"echo": "true"}).json["messages"] == []
    assert [e["event"] for e in events(tmp_path / "journal")] == ["posted", "posted"]

    t1 = api.clock.now_ms()
    assert api.delete("/v2/queues/q/messages", params={"ids": f"{a},{b}"}).status_code == 204
    base = {"ts": t1, "event": "deleted", "project": P, "queue": "q", "claim_id": None}
    assert events(tmp_path / "journal")[2:] == [
        {**base, "message_id": m, "repeat": True} for m in (a, b)
    ]


def test_an_edit_is_journaled_with_what_it_replaced_never_the_body(
    journaled: Api, tmp_path: pathlib.Path
) -> None:
    api = journaled
    t0 = api.clock.now_ms()
    [mid] = api.post_messages("q", {"body": "draft", "deliver_at": t0 + 60_000})
    api.clock.advance(1)
    edited = api.patch(f"/v2/queues/q/messages/{mid}", json={"body": "card-4111", "ttl": 600})
    assert edited.status_code == 204
    api.patch(f"/v2/queues/q/messages/{mid}", json={"body": "final", "delay": 5})
    lines = (tmp_path / "journal").glob("*.jsonl")
    assert "card-4111" not in "".join(path.read_text() for path in lines)
    base = {"project": P, "queue": "q", "message_id": mid, "event": "edited", "claim_id": None}
    assert events(tmp_path / "journal")[1:] == [
        {**base, "ts": t0 + 1000, "changed": ["body", "ttl"], "due": None, "ttl": 600},
        {**base, "ts": t0 + 1000, "changed": ["body", "due"], "due": t0 + 6000, "ttl": None},
    ]


def test_dead_lettering_and_bulk_deletes(journaled: Api, tmp_path: pathlib.Path) -> None:
    api = journaled
    api.put("/v2/queues/q", json={"_max_claim_count": 1, "_dead_letter_queue": "dead"})
    [poison, other] = api.post_messages("q", {"body": "poison"}, {"body": "other"})
    first = api.post("/v2/queues/q/claims", params={"limit": 1})
    api.delete(f"/v2/queues/q/claims/{claim_id_of(first)}")
    api.delete("/v2/queues/q/messages", params={"ids": other})
    assert api.post("/v2/queues/q/claims").status_code == 204
    kinds = [(e["event"], e["message_id"]) for e in events(tmp_path / "journal")]
    assert kinds == [
        ("posted", poison),
        ("posted", other),
        ("claimed", poison),
        ("released", poison),
        ("deleted", other),
        ("dead_lettered", poison),
    ]
    assert events(tmp_path / "journal")[-1]["dead_letter_queue"] == "dead"


def test_a_message_a_push_consumed_is_journaled_deleted(
    journaled: Api, tmp_path: pathlib.Path
) -> None:
    """A queue with ``_delete_after_push``: the push that delivers a message deletes it, and
    the journal (and so the Spark report) says so, as for a consumer's delete."""
    api = journaled
    api.put("/v2/queues/q", json={"_delete_after_push": True})
    with receiver() as hook, dispatching(api) as dispatcher:
        subscribe(api, hook)
        [mid] = api.post_messages("q", {"body": 1})
        dispatcher.run_once()
        hook.wait_for(1)
    assert api.get(f"/v2/queues/q/messages/{mid}").status_code == 404, "the push kept it"
    kinds = [(e["event"], e["message_id"]) for e in events(tmp_path / "journal")]
    assert kinds == [("posted", mid), ("pushed", mid), ("deleted", mid)]


def test_files_rotate_with_whole_lines(tmp_path: pathlib.Path) -> None:
    journal = Journal(str(tmp_path), max_bytes=1000)
    for i in range(100):
        journal.write([{"ts": i, "event": "posted", "pad": "x" * 40}, {"ts": i, "event": "e"}])
    journal.close()
    paths = sorted(glob.glob(str(tmp_path / "*.jsonl")))
    assert len(paths) > 5
    assert all(os.path.getsize(p) < 1000 + 200 for p in paths)
    assert [e["ts"] for e in events(tmp_path)] == [i for i in range(100) for _ in range(2)]


def _write_in_child(directory: str, journal: Journal) -> None:
    journal.write([{"ts": 2, "event": "child"}])
    journal.close()


def test_each_process_writes_its_own_files(tmp_path: pathlib.Path) -> None:
    journal = Journal(str(tmp_path))
    journal.write([{"ts": 1, "event": "parent"}])
    child = multiprocessing.get_context("fork").Process(
        target=_write_in_child, args=(str(tmp_path), journal)
    )
    child.start()
    child.join()
    journal.write([{"ts": 3, "event": "parent"}])
    journal.close()
    paths = sorted(glob.glob(str(tmp_path / "*.jsonl")))
    pids = {pathlib.Path(p).name.split("-")[2] for p in paths}
    assert len(paths) == 2 and pids == {str(os.getpid()), str(child.pid)}
    assert sorted(e["ts"] for e in events(tmp_path)) == [1, 2, 3]


def test_off_unless_configured(tmp_path: pathlib.Path) -> None:
    assert type(open_journal("")) is NullJournal
    assert not open_journal("").enabled
    assert isinstance(open_journal(str(tmp_path / "j")), Journal)
    assert os.path.isdir(tmp_path / "j")


def test_lines_stay_json_whatever_the_ids(tmp_path: pathlib.Path) -> None:
    journal = Journal(str(tmp_path))
    hostile = 'a"b\\\nc\u2028\ud800é'
    journal.deleted("p\n", "q", [hostile], hostile, 5, [hostile])
    journal.rescheduled("p", "q", MessageEdit(hostile, None, due_ms=7), 6)
    journal.close()
    assert events(tmp_path) == [
        {"ts": 5, "event": "deleted", "project": "p\n", "queue": "q", "message_id": hostile}
        | {"claim_id": hostile},
        {"ts": 5, "event": "deleted", "project": "p\n", "queue": "q", "message_id": hostile}
        | {"claim_id": hostile, "repeat": True},
        {"ts": 6, "event": "rescheduled", "project": "p", "queue": "q", "message_id": hostile}
        | {"claim_id": None, "due": 7},
    ]
