"""Wake-ups for waiting claims over MongoDB: an announced-waiters collection and a change
stream on a small wake-up collection.

Writers insert a wake-up only while the queue has an announced waiter, so queues nobody
waits on pay one indexed lookup per post, release or reschedule. Change streams need a
replica set or mongos; on a standalone server the listener gives up and waiting claims fall
back to re-checking on their timer.
"""

from __future__ import annotations

import datetime
import json
import logging
import threading
from typing import Any

import pymongo
from pymongo.write_concern import WriteConcern

from zaqar_delay.storage.mongodb import schema
from zaqar_delay.storage.mongodb.errors import translate_errors
from zaqar_delay.storage.traits import OnReconnect, OnWake, Wakeups

LOG = logging.getLogger(__name__)

# Wake-ups are ephemeral: one acknowledgement is enough, and they vanish after a minute.
EPHEMERAL = WriteConcern(w=1)
WAKEUP_LIFETIME = datetime.timedelta(minutes=1)
POLL_MS = 1000
# "The $changeStream stage is only supported on replica sets".
CHANGE_STREAMS_UNSUPPORTED = 40573


def _utcnow() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class MongoWakeups(Wakeups):
    def __init__(self, db: Any, closed: threading.Event) -> None:
        self._closed = closed
        self._waiters = db[schema.WAITERS].with_options(write_concern=EPHEMERAL)
        self._wakeups = db[schema.WAKEUPS].with_options(write_concern=EPHEMERAL)

    def channel(self, project: str, queue: str) -> str:
        return json.dumps([project, queue])

    @translate_errors
    def announce(self, project: str, queue: str, ttl_ms: int) -> None:
        until = _utcnow() + datetime.timedelta(milliseconds=ttl_ms)
        self._waiters.update_one(
            {"_id": self.channel(project, queue)}, {"$set": {"ex": until}}, upsert=True
        )

    def wake(self, project: str, queue: str) -> None:
        """Called by writers: send a wake-up if a server waits on this queue."""
        channel = self.channel(project, queue)
        now = _utcnow()
        if self._waiters.find_one({"_id": channel, "ex": {"$gt": now}}, {"_id": 1}):
            self._wakeups.insert_one({"c": channel, "ex": now + WAKEUP_LIFETIME})

    def listen(self, on_wake: OnWake, on_reconnect: OnReconnect, stop: threading.Event) -> None:
        pipeline = [{"$match": {"operationType": "insert"}}]

        def stopped() -> bool:
            return stop.is_set() or self._closed.is_set()

        while not stopped():
            try:
                with self._wakeups.watch(pipeline, max_await_time_ms=POLL_MS) as stream:
                    on_reconnect()
                    while not stopped():
                        change = stream.try_next()
                        if change is not None:
                            on_wake(change["fullDocument"]["c"])
            except pymongo.errors.OperationFailure as exc:
                if exc.code == CHANGE_STREAMS_UNSUPPORTED:
                    LOG.warning("no change streams on this MongoDB; waiting claims re-check")
                    on_reconnect()
                    return
                LOG.warning("wake-up change stream failed (%s); reconnecting", exc)
                stop.wait(POLL_MS / 1000)
            except (pymongo.errors.PyMongoError, ValueError) as exc:
                if not stopped():
                    LOG.warning("wake-up change stream lost (%s); reconnecting", exc)
                stop.wait(POLL_MS / 1000)
