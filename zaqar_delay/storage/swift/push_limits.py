"""Dispatch limits of subscriptions on Swift (``zaqar_delay.dispatch_limits``), shared by every
server process through objects of the pushes container, each changed only by creating its
next generation (``SwiftClient.create_settled``):

- ``r/<p>/<q>/<sid>/<g>``: the subscription's rate, its next free slot ``t``, offset ``o``
  and last send ``l`` (ms), taken by ``storage.rate_reservation``;
- ``p/<p>/<q>/<sid>/<i>/<g>``: request place ``i`` of its concurrency, held by ``h``
  (``"<push id>@<lease>"``) until ``e``, the lease's end; a place whose lease ran out is free.

A push held back by the rate is owed again at the time reserved for it (``r`` on its index
entry, and ``s`` the slot, so the reservation is not taken twice). One held back by
concurrency is parked: owed again when the first held place frees by itself (its lease's end),
its own time kept (``o``), and owed again at that time as soon as a request of its
subscription ends. A parking that races with the end of that request therefore delays the push
by one lease at most; it is never stranded.
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from typing import Any

from zaqar_delay.storage.push_leasing import DuePush, Lease
from zaqar_delay.storage.rate_reservation import RateState
from zaqar_delay.storage.swift import names
from zaqar_delay.storage.swift.common import SwiftBase


@dataclasses.dataclass(frozen=True, slots=True)
class RateGenerations:
    """A subscription's rate (``rate_reservation.RateCell``): the generations
    ``r/<p>/<q>/<sid>/<g>``, whose version is the generation number; a replace creates the
    next one, and only one creator of a generation wins."""

    ops: PushLimitOps
    prefix: str

    def read(self) -> tuple[RateState | None, object]:
        generation, held = self.ops._latest_generation(self.prefix)
        if held is None:
            return None, generation
        return RateState(float(held["t"]), int(held.get("o", 0)), held.get("l")), generation

    def replace(self, version: object, state: RateState) -> bool:
        assert isinstance(version, int)
        held = {"t": state.free_ms, "o": state.offset_ms, "l": state.last_ms}
        return self.ops._create_generation(self.prefix, version + 1, held)


class PushLimitOps(SwiftBase):
    """Take and give back what subscriptions' dispatch limits allow."""

    def _latest_generation(self, prefix: str) -> tuple[int, dict[str, Any] | None]:
        """The highest generation under ``prefix`` and what it holds (0, None: none)."""
        generation, found = self._swift.latest_numbered(self._container(names.PUSHES), prefix)
        return generation, None if found is None else dict(json.loads(found[1]))

    def _create_generation(self, prefix: str, generation: int, held: dict[str, Any]) -> bool:
        body = json.dumps({**held, "k": secrets.token_hex(8)}).encode()
        return self._swift.create_settled(
            self._container(names.PUSHES),
            prefix + names.number_part(generation),
            body,
            names.CONTENT_TYPE,
        )

    def _rate_prefix(self, project: str, queue: str, sid: str) -> str:
        return f"r/{names.queue_prefix(project, queue)}{sid}/"

    def _places_prefix(self, project: str, queue: str, sid: str) -> str:
        return f"p/{names.queue_prefix(project, queue)}{sid}/"

    def _rate(self, lease: Lease, sid: str) -> RateGenerations:
        return RateGenerations(self, self._rate_prefix(lease.project, lease.queue, sid))

    def _take_place(
        self, lease: Lease, push: DuePush, sid: str, concurrency: int, known: dict[int, int]
    ) -> tuple[int | None, int]:
        """Hold one of the subscription's ``concurrency`` request places for ``push`` until
        the lease ends: the number of the place now held (None: none was free), and the
        earliest time a held place frees by itself.

        ``known``: places the caller found held (or took) before, by number, with the time
        each frees; they are not read again, and the places found held or taken here are
        added. One lease taking places for many pushes so reads each place once, not once
        per push (a place given back meanwhile is found by the next lease)."""
        project, queue, until_ms, now_ms = lease.project, lease.queue, lease.end_ms, lease.now_ms
        frees_ms = min([until_ms, *known.values()])
        for place in range(concurrency):
            if known.get(place, 0) > now_ms:
                continue
            prefix = f"{self._places_prefix(project, queue, sid)}{place}/"
            generation, held = self._latest_generation(prefix)
            if held is not None and int(held["e"]) > now_ms:
                known[place] = int(held["e"])
                frees_ms = min(frees_ms, int(held["e"]))
                continue
            held_by = {"h": lease.holder(push), "e": until_ms}
            if self._create_generation(prefix, generation + 1, held_by):
                known[place] = until_ms
                return place, frees_ms
        return None, frees_ms

    def _give_back_place(
        self, project: str, queue: str, sid: str, holder: str, place: int | None = None
    ) -> bool:
        """Free the place ``holder`` holds; False if it holds none (its lease ran out and the
        place was taken again). ``place``: the number of the place it took, looked at first
        (the others are looked through only when it holds that one no more)."""
        prefix = self._places_prefix(project, queue, sid)
        if place is not None and self._free_if_held(f"{prefix}{place}/", holder):
            return True
        places = {
            entry["name"][len(prefix) :].split("/", 1)[0]
            for entry in self._swift.walk(self._container(names.PUSHES), prefix)
        }
        return any(
            self._free_if_held(f"{prefix}{other}/", holder)
            for other in sorted(places)
            if other != str(place)
        )

    def _free_if_held(self, place_prefix: str, holder: str) -> bool:
        """Free the place under ``place_prefix`` if ``holder`` holds it."""
        generation, held = self._latest_generation(place_prefix)
        if held is None or held["h"] != holder or not int(held["e"]):
            return False
        self._swift.put(
            self._container(names.PUSHES),
            place_prefix + names.number_part(generation),
            json.dumps({**held, "e": 0}).encode(),
            names.CONTENT_TYPE,
        )
        return True

    def _forget_limit_state(self, project: str, queue: str, sid: str) -> None:
        self._swift.delete_all(
            self._container(names.PUSHES),
            self._rate_prefix(project, queue, sid),
            self._places_prefix(project, queue, sid),
        )
