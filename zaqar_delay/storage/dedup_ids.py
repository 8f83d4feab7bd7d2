"""Dedup ids within one post, as every driver that remembers them in Python reads them: which
message first carries each id, and which positions are duplicates of what."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from zaqar_delay.models import NewMessage


class PostDedupIds:
    """The dedup ids of a post's ``messages``: ``first`` maps each id to the position of the
    first message carrying it; ``repeated`` maps every position carrying an id to that first
    position (itself for the first)."""

    def __init__(self, messages: Sequence[NewMessage]) -> None:
        self.first: dict[str, int] = {}
        self.repeated: dict[int, int] = {}
        for i, message in enumerate(messages):
            if message.dedup_id:
                self.repeated[i] = self.first.setdefault(message.dedup_id, i)

    def duplicates(self, remembered: Mapping[str, str], ids: Sequence[str]) -> dict[int, str]:
        """{position: id of the earlier message} given the ids the queue already remembered
        (``remembered``: dedup id -> message id) and this post's message ``ids``: a position
        repeats a remembered id, or an id an earlier message of the post carries."""
        duplicate_of: dict[int, str] = {}
        by_first = {i: dedup_id for dedup_id, i in self.first.items()}
        for i, first in self.repeated.items():
            earlier = remembered.get(by_first[first])
            if earlier is not None:
                duplicate_of[i] = earlier
            elif first != i:
                duplicate_of[i] = ids[first]
        return duplicate_of
