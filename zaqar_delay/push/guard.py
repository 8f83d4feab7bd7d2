"""Which addresses pushes may reach: by default everything but link-local and cloud metadata
addresses (a subscriber could otherwise make the service read a cloud's credentials).

The address is checked when a subscription is made and again on the connected socket, before
anything is sent, so a name that resolves elsewhere later (DNS rebinding) is refused too.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Sequence

DEFAULT_DENY = ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


class DeniedAddress(Exception):
    """The subscriber resolves to an address pushes may not reach."""


class AddressGuard:
    """Denies ``deny`` networks unless ``allow`` (checked first) names the address."""

    def __init__(self, deny: Sequence[str] = DEFAULT_DENY, allow: Sequence[str] = ()) -> None:
        self.deny: list[Network] = [ipaddress.ip_network(n, strict=False) for n in deny]
        self.allow: list[Network] = [ipaddress.ip_network(n, strict=False) for n in allow]

    def permits(self, address: str) -> bool:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if any(ip in network for network in self.allow):
            return True
        return not any(ip in network for network in self.deny)

    def check_host(self, host: str) -> None:
        """DeniedAddress when an address ``host`` resolves to now is denied. A name that does
        not resolve now passes: the connection is checked again when a push is sent."""
        try:
            found = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError):
            return
        for *_, sockaddr in found:
            if not self.permits(str(sockaddr[0])):
                raise DeniedAddress(f"{host} is {sockaddr[0]}, which pushes may not reach")
