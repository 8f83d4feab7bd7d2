"""Commands to embedded stores from outside their supervision: shutting one down (when its
server stops, or a pool is removed) and finding the stores below a directory."""

from __future__ import annotations

import enum
import logging
import os
import time

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from zaqar_delay.storage.redis.store_files import SOCKET_FILE

LOG = logging.getLogger(__name__)

# How long closing waits for other clients to leave before it leaves the store up for them.
CLOSE_GRACE_S = 3.0


def control_client(socket_path: str) -> redis.Redis:
    """A client that sends each command once: the callers poll at their own pace, and a
    SHUTDOWN answered by the connection closing is done, not to be sent again (redis-py's
    default retries a failed command three times with backoff, seconds in all)."""
    return redis.Redis(
        unix_socket_path=socket_path, socket_timeout=5.0, retry=Retry(NoBackoff(), 0)
    )


class Shutdown(enum.Enum):
    """What :func:`shut_down` left."""

    DONE = "shut down, or not running"
    IN_USE = "left up for its other clients"
    UNANSWERED = "running, but it did not answer (a stopped process, a disk that hangs)"


def shut_down(directory: str, shared_grace_s: float | None = CLOSE_GRACE_S) -> Shutdown:
    """Shut down the redis-server of the embedded store in ``directory``, if one runs (it
    fsyncs the append-only file first). With ``shared_grace_s``, only once it has no client
    but this one, waiting that long for others (workers killed a moment ago) to leave;
    ``None``: whoever is connected."""
    client = control_client(os.path.join(directory, SOCKET_FILE))
    try:
        if shared_grace_s is not None:
            deadline = time.monotonic() + shared_grace_s
            while len(client.client_list()) > 1:
                if time.monotonic() > deadline:
                    return Shutdown.IN_USE  # its users' supervisors watch it
                time.sleep(0.1)
        client.shutdown(nosave=True)  # still fsyncs the append-only file
    except (redis.ConnectionError, FileNotFoundError):
        pass  # not running, or shut down by the command above
    except redis.RedisError as exc:
        LOG.warning("the embedded Redis at %s did not shut down: %s", directory, exc)
        return Shutdown.UNANSWERED
    finally:
        client.close()
    return Shutdown.DONE


def store_directories_below(root: str) -> list[str]:
    """The directories strictly below ``root`` that hold an embedded store (its socket)."""
    found = []
    for directory, _, files in os.walk(root):
        if SOCKET_FILE in files and os.path.realpath(directory) != os.path.realpath(root):
            found.append(directory)
    return sorted(found)
