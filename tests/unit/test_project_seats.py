"""The waiting claims each project may hold in a server process (``waiting_seats.ProjectSeats``)."""

from __future__ import annotations

from contextlib import ExitStack

from zaqar_delay.waiting_seats import ProjectSeats


def test_a_project_holds_at_most_its_seats_and_gives_them_back() -> None:
    seats = ProjectSeats(2)
    with ExitStack() as held:
        assert held.enter_context(seats.taken("a")) is True
        assert held.enter_context(seats.taken("a")) is True
        with seats.taken("a") as third:
            assert third is False
        with seats.taken("b") as other:
            assert other is True  # another project's seats are its own
    with seats.taken("a") as again:
        assert again is True


def test_a_refused_seat_gives_back_nothing() -> None:
    seats = ProjectSeats(1)
    with seats.taken("a") as first:
        assert first
        with seats.taken("a") as refused:
            assert not refused
        # The refusal's end did not free the seat that is still held.
        with seats.taken("a") as still:
            assert not still


def test_no_limit_when_zero() -> None:
    seats = ProjectSeats(0)
    with ExitStack() as held:
        assert all(held.enter_context(seats.taken("a")) for _ in range(1000))
