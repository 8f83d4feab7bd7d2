"""Which addresses pushes may reach, and the only way a push connects: resolve once, check every
address, connect to the checked ones.

Three layers, in this order:

- **Never**: the unspecified addresses (``0.0.0.0/8``, ``::``). They name no remote host; a
  connection to them reaches this machine.
- **Protected**: link-local and cloud metadata addresses (``PROTECTED``), where a subscriber
  could make the service read a cloud's credentials. Denied whatever ``denied_networks`` says;
  only an ``allowed_networks`` entry that lies inside one of them opens it (so allowing
  ``0.0.0.0/0`` or ``10.0.0.0/8`` never reopens ``169.254.169.254``).
- **The operator's lists**: ``allow`` is checked first, then ``deny``. A guard for a service
  whose tenants are strangers to the operator (``auth_strategy = keystone``, see
  :func:`tenant_guard`) also denies, by default, the operator's own networks (``PRIVATE``:
  loopback, RFC 1918, CGNAT, unique-local IPv6) and every address of this machine; as with
  ``deny``, only ``allow`` reopens them.

An IPv6 address that carries an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, IPv4-compatible
``::a.b.c.d``, SIIT ``::ffff:0:a.b.c.d``, NAT64 ``64:ff9b::/96`` and ``64:ff9b:1::/48``, 6to4
``2002::/16``, Teredo) is permitted only when the IPv6 address and every IPv4 address in it are;
a zone id (``%eth0``) is ignored. The checks run when a subscription is made and when a push
connects: :meth:`AddressGuard.connect` resolves the name once, refuses it if any address it
resolves to is denied, and connects only to those addresses, so neither DNS rebinding nor the
answer of a denied port (refused or open) ever reaches a tenant.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
import time
from collections.abc import Callable, Sequence

import psutil

Address = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

NEVER = ("0.0.0.0/8", "::/128")
PROTECTED = ("169.254.0.0/16", "fe80::/10", "fd00:ec2::254/128", "100.100.100.200/32")

# Where a push would reach the operator's own hosts rather than a tenant's endpoint: loopback,
# RFC 1918, CGNAT (RFC 6598) and unique-local IPv6 (RFC 4193).
PRIVATE = (
    "127.0.0.0/8",
    "::1/128",
    "10.0.0.0/8",
    "172.16.0.0/12",
    "192.168.0.0/16",
    "100.64.0.0/10",
    "fc00::/7",
)
# Seconds the list of this machine's addresses is kept before it is read again.
OWN_ADDRESSES_REFRESH_S = 10.0

_NAT64 = (ipaddress.IPv6Network("64:ff9b::/96"), ipaddress.IPv6Network("64:ff9b:1::/48"))
_SIIT = ipaddress.IPv6Network("::ffff:0:0:0/96")
_LOW_32 = 0xFFFFFFFF


class DeniedAddress(Exception):
    """The subscriber resolves to an address pushes may not reach."""


def tenant_guard(deny: Sequence[str], allow: Sequence[str], *, strangers: bool) -> AddressGuard:
    """The guard of a service's pushes. ``strangers``: any tenant of a cloud may subscribe
    (keystone), so the operator's networks (``PRIVATE``) and this machine's addresses are
    denied too, unless ``allow`` reopens them; otherwise (noauth, one trusted tenant) only
    the operator's lists apply."""
    if not strangers:
        return AddressGuard(deny, allow)
    return AddressGuard((*PRIVATE, *deny), allow, OwnAddresses())


def _networks(names: Sequence[str]) -> list[Network]:
    return [ipaddress.ip_network(name, strict=False) for name in names]


def parse(address: str) -> Address:
    """``address`` (an IP literal, with or without brackets and zone id) as an address."""
    return ipaddress.ip_address(address.strip("[]").split("%", 1)[0])


def embedded_ipv4(ip: Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries and that a packet to it may reach."""
    if isinstance(ip, ipaddress.IPv4Address):
        return []
    found: list[ipaddress.IPv4Address] = []
    value = int(ip)
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    elif value >> 32 == 0 and value > 1:  # IPv4-compatible ::a.b.c.d (not :: or ::1)
        found.append(ipaddress.IPv4Address(value))
    if ip in _SIIT or any(ip in prefix for prefix in _NAT64):
        found.append(ipaddress.IPv4Address(value & _LOW_32))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)
    return found


class OwnAddresses:
    """The addresses of this machine's interfaces, read again after ``refresh_s`` seconds so
    that an address added while the service runs is denied too."""

    def __init__(self, refresh_s: float = OWN_ADDRESSES_REFRESH_S) -> None:
        self._refresh_s = refresh_s
        self._lock = threading.Lock()
        self._read_at = float("-inf")
        self._addresses: frozenset[Address] = frozenset()

    def __call__(self) -> frozenset[Address]:
        with self._lock:
            if time.monotonic() - self._read_at >= self._refresh_s:
                self._addresses = frozenset(
                    parse(entry.address)
                    for entries in psutil.net_if_addrs().values()
                    for entry in entries
                    if entry.family in (socket.AF_INET, socket.AF_INET6)
                )
                self._read_at = time.monotonic()
            return self._addresses


class AddressGuard:
    """Permits an address unless it is never reachable, protected, or in ``deny`` (or, with
    ``own``, one of the addresses it returns) and not in ``allow`` (see the module's docstring
    for the order)."""

    def __init__(
        self,
        deny: Sequence[str] = (),
        allow: Sequence[str] = (),
        own: Callable[[], frozenset[Address]] | None = None,
    ) -> None:
        self.own = own
        self.never = _networks(NEVER)
        self.protected = _networks(PROTECTED)
        self.deny = _networks(deny)
        self.allow = _networks(allow)
        # Only an allowed network inside a protected one opens (part of) it.
        self.allow_protected = [
            network
            for network in self.allow
            if any(
                network.version == protected.version and network.subnet_of(protected)  # type: ignore[arg-type]
                for protected in self.protected
            )
        ]

    def permits(self, address: str) -> bool:
        """Whether pushes may reach ``address`` (ValueError: it is no IP address)."""
        ip = parse(address)
        return all(self._permits(form) for form in (ip, *embedded_ipv4(ip)))

    def _permits(self, ip: Address) -> bool:
        if any(ip in network for network in self.never):
            return False
        if any(ip in network for network in self.protected):
            return any(ip in network for network in self.allow_protected)
        if any(ip in network for network in self.allow):
            return True
        if self.own is not None and ip in self.own():
            return False
        return not any(ip in network for network in self.deny)

    def resolve(self, host: str, port: int) -> list[tuple[str, int]]:
        """The addresses ``host`` resolves to now, each checked: DeniedAddress when any of
        them is denied, OSError when it does not resolve."""
        try:
            found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except UnicodeError as exc:
            raise OSError(f"{host!r} is not a host name: {exc}") from exc
        addresses: list[tuple[str, int]] = []
        for *_, sockaddr in found:
            address = str(sockaddr[0])
            if not self.permits(address):
                named = (
                    f"{address} is"
                    if address == host
                    else f"{host} resolves to {address}, which is"
                )
                raise DeniedAddress(f"{named} an address pushes may not reach")
            if (address, port) not in addresses:
                addresses.append((address, port))
        return addresses

    def check_host(self, host: str) -> None:
        """DeniedAddress when ``host`` is a denied address, or an address it resolves to now
        is denied. A name that does not resolve now passes: the connection is checked again
        when a push is sent."""
        try:
            literal = self.permits(host)
        except ValueError:  # a name, not an address
            literal = True
        if not literal:
            # Checked as written: a zone id spelt as a URI spells it ("%25eth0") does not
            # resolve, and would pass as a name that does not resolve yet.
            raise DeniedAddress(f"{host} is an address pushes may not reach")
        try:
            self.resolve(host, 0)
        except OSError:
            return

    def connect(
        self,
        address: tuple[str, int],
        timeout: float | None = None,
        source_address: tuple[str, int] | None = None,
    ) -> socket.socket:
        """``socket.create_connection`` to the checked addresses of ``address`` only: nothing
        is sent to a host, nor a connection tried, before every address it names passed."""
        last_error: OSError | None = None
        for checked in self.resolve(*address):
            try:
                return socket.create_connection(checked, timeout, source_address)
            except OSError as exc:
                last_error = exc
        raise last_error or OSError(f"{address[0]} resolves to no address")
