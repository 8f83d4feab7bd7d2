"""What every v2 resource shares: the service it calls."""

from __future__ import annotations

from zaqar_delay.service import Service


class Resource:
    """A falcon resource bound to the service (who may call it: ``routes.ROUTES``)."""

    def __init__(self, service: Service) -> None:
        self.service = service

    @property
    def with_checksum(self) -> bool:
        """Whether message objects show Zaqar's ``checksum`` (``[DEFAULT] enable_checksum``)."""
        return self.service.limits.enable_checksum
