"""Wake-ups between the workers of one server (``sibling_wakeups``), for a store that sends
none: a write in one process wakes the waiting claims of another, and what cannot be sent is
dropped without holding the writer."""

from __future__ import annotations

import errno
import multiprocessing
import os
import pathlib
import socket
import tempfile

import pytest

from testbed.processes import wait_until
from zaqar_delay import master_directories, sibling_wakeups, waiting
from zaqar_delay.clock import FakeClock
from zaqar_delay.sibling_wakeups import Siblings
from zaqar_delay.waiting import WaitRoom

FORK = multiprocessing.get_context("fork")


@pytest.fixture
def directory(short_tmp: str) -> str:
    return short_tmp


def wait_in_a_sibling(
    directory: str,
    looked: multiprocessing.synchronize.Event,
    posted: multiprocessing.synchronize.Event,
    answers: multiprocessing.Queue,
) -> None:
    """A worker of slot 1 with one waiting claim, which finds a message once ``posted``
    (``looked``: it looked once)."""
    sibling_wakeups._directory = directory
    sibling_wakeups.join(1)
    room = WaitRoom(None, FakeClock())
    attempts = []

    def attempt() -> str | None:
        found = posted.is_set()  # read once: the test posts as soon as it sees the first look
        attempts.append(found)
        looked.set()
        return "claimed" if found else None

    got = room.wait_for("p", "q", 30.0, attempt, lambda now_ms: None)
    answers.put((got, attempts))


def test_a_write_in_one_worker_wakes_a_waiting_claim_in_another(
    directory: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The waiter's own timer is beyond its wait: without a wake-up from this process it
    # would answer nothing after 30 s.
    monkeypatch.setattr(waiting, "RECHECK_WITHOUT_WAKEUPS_S", 60.0)
    looked, posted, answers = FORK.Event(), FORK.Event(), FORK.Queue()
    child = FORK.Process(target=wait_in_a_sibling, args=(directory, looked, posted, answers))
    child.start()
    try:
        wait_until(lambda: os.path.exists(os.path.join(directory, "1")), 10, "the waiter's socket")
        # Posted after the claim's first look, which found nothing: only a wake-up ends it.
        assert looked.wait(10)
        writer = WaitRoom(None, FakeClock())
        monkeypatch.setattr(sibling_wakeups, "_joined", Siblings(directory, "0"))
        posted.set()
        writer.written("p", "q")
        got, attempts = answers.get(timeout=40)
    finally:
        child.join(5)
        child.kill()
    assert got == "claimed"
    assert attempts[-1] and not attempts[0]


def test_what_cannot_be_sent_is_dropped(directory: str) -> None:
    # A socket left by a worker that died, and one whose reader stopped reading.
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    dead.bind(os.path.join(directory, "0"))
    dead.close()
    stuck = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    stuck.bind(os.path.join(directory, "1"))
    teller = Siblings(directory, "2")
    for _ in range(10_000):
        teller.tell("p/q")
    # The fault happened: the stuck worker's buffer is full, and the dead one refuses.
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    probe.setblocking(False)
    with pytest.raises(BlockingIOError):
        probe.sendto(b"p/q", os.path.join(directory, "1"))
    with pytest.raises(ConnectionRefusedError):
        probe.sendto(b"p/q", os.path.join(directory, "0"))
    stuck.setblocking(False)
    assert stuck.recv(100) == b"p/q"
    probe.close()
    stuck.close()


def test_a_line_name_too_long_is_not_sent(directory: str) -> None:
    reader = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    reader.bind(os.path.join(directory, "1"))
    reader.setblocking(False)
    teller = Siblings(directory, "0")
    teller.tell("p/" + "q" * sibling_wakeups.MAX_CHANNEL_BYTES)
    teller.tell("p/q")
    assert reader.recv(sibling_wakeups.MAX_CHANNEL_BYTES * 2) == b"p/q"
    with pytest.raises(BlockingIOError) as raised:
        reader.recv(100)
    assert raised.value.errno == errno.EAGAIN
    reader.close()


def test_the_master_makes_the_directory_and_removes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sibling_wakeups, "_directory", None)
    monkeypatch.setattr(sibling_wakeups, "_joined", None)
    sibling_wakeups.prepare()
    made = sibling_wakeups._directory
    assert made is not None and os.stat(made).st_mode & 0o777 == 0o700
    sibling_wakeups.join(3)
    joined = sibling_wakeups.joined()
    assert joined is not None
    joined.listen(lambda line: None)
    assert sorted(os.listdir(made)) == [master_directories.LOCK_NAME, "3"]
    sibling_wakeups.remove()
    assert not os.path.exists(made)


def test_without_a_directory_the_workers_run_alone(
    monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path
) -> None:
    monkeypatch.setattr(sibling_wakeups, "_directory", None)
    monkeypatch.setattr(sibling_wakeups, "_joined", None)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    sibling_wakeups.prepare()  # the master goes on forking its workers
    assert sibling_wakeups._directory is None
    sibling_wakeups.join(0)
    assert sibling_wakeups.joined() is None
