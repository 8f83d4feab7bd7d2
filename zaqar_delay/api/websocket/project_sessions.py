"""How many WebSocket sessions each project holds in this server process.

Under keystone a session belongs to the project of the token it authenticated with (which
keystonemiddleware tells the checking request); each project holds at most a configured
number at once, so one tenant cannot take every session a worker serves. Without keystone a
frame may name any project, so sessions are bounded per process only.
"""

from __future__ import annotations

import threading


class ProjectSessions:
    """Sessions held per project, at most ``limit`` each."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._held: dict[str, int] = {}
        self._lock = threading.Lock()

    def take(self, project: str) -> bool:
        """Count one more session of ``project``; False (nothing counted) at the limit."""
        with self._lock:
            held = self._held.get(project, 0)
            if held >= self.limit:
                return False
            self._held[project] = held + 1
            return True

    def give(self, project: str) -> None:
        """A session of ``project`` ended (or moved to another project)."""
        with self._lock:
            held = self._held.get(project, 0) - 1
            if held > 0:
                self._held[project] = held
            else:
                self._held.pop(project, None)
