"""What every v2 resource shares: the service it calls."""

from __future__ import annotations

from zaqar_delay.service import Service


class Resource:
    """A falcon resource bound to the service. ``public`` skips header checks; ``admin_only``
    requires the admin role."""

    public = False
    admin_only = False

    def __init__(self, service: Service) -> None:
        self.service = service
