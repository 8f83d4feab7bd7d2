"""Pushes over TLS: the receiver's certificate is verified, the connection goes through the
address guard like a plain one, and a kept-alive TLS connection carries request after
request. The receiver is a real TLS server on loopback with a certificate made here."""

from __future__ import annotations

import datetime
import ipaddress
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from zaqar_delay.push.connections import ConnectionPool
from zaqar_delay.push.guard import AddressGuard, DeniedAddress

LOOPBACK = AddressGuard(deny=["0.0.0.0/0"], allow=["127.0.0.0/8"])
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, signed by its own key: (certificate, key) files."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_file, key_file = directory / "receiver.pem", directory / "receiver.key"
    cert_file.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_file.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_file, key_file


class TlsReceiver:
    """Answers 200 to each request on kept-alive TLS connections; counts TCP connections and
    records the request bodies it read."""

    def __init__(self, cert_file: Path, key_file: Path) -> None:
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(cert_file, key_file)
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.connections = 0
        self.peer_ports: list[int] = []
        self.bodies: list[bytes] = []

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}/hook"

    def run(self) -> None:
        while True:
            try:
                raw, peer = self.listener.accept()
            except OSError:
                return
            self.connections += 1
            self.peer_ports.append(peer[1])
            threading.Thread(target=self._serve, args=(raw,), daemon=True).start()

    def _serve(self, raw: socket.socket) -> None:
        try:
            with self.tls.wrap_socket(raw, server_side=True) as sock:
                reader = sock.makefile("rb")
                while True:
                    head = b""
                    while not head.endswith(b"\r\n\r\n"):
                        line = reader.readline()
                        if not line:
                            return
                        head += line
                    length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
                    self.bodies.append(reader.read(length))
                    sock.sendall(OK)
        except (OSError, ssl.SSLError):
            return


@contextmanager
def tls_receiver(directory: Path) -> Iterator[tuple[TlsReceiver, Path]]:
    cert_file, key_file = self_signed(directory)
    receiver = TlsReceiver(cert_file, key_file)
    thread = threading.Thread(target=receiver.run, daemon=True)
    thread.start()
    try:
        yield receiver, cert_file
    finally:
        receiver.listener.close()


def test_a_receiver_with_a_trusted_certificate_gets_request_after_request(
    tmp_path: Path,
) -> None:
    with tls_receiver(tmp_path) as (receiver, cert_file):
        pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=2)
        pool._tls = ssl.create_default_context(cafile=str(cert_file))  # trust this receiver
        assert pool.post(receiver.url, b"first", {}).status == 200
        assert pool.post(receiver.url, b"second", {}).status == 200
        assert receiver.bodies == [b"first", b"second"]
        assert receiver.connections == 1
        pool.close()


def test_a_certificate_that_does_not_verify_is_refused_before_the_body_is_sent(
    tmp_path: Path,
) -> None:
    with tls_receiver(tmp_path) as (receiver, _):
        pool = ConnectionPool(LOOPBACK, timeout_s=5, idle_per_origin=2)
        with pytest.raises(ssl.SSLCertVerificationError):
            pool.post(receiver.url, b"secret", {})
        assert receiver.connections == 1  # the handshake was tried...
        assert receiver.bodies == []  # ...and nothing was sent


def test_a_denied_address_is_not_connected_to_over_tls_either(tmp_path: Path) -> None:
    with tls_receiver(tmp_path) as (receiver, cert_file):
        pool = ConnectionPool(AddressGuard(deny=["127.0.0.0/8"]), timeout_s=5, idle_per_origin=2)
        pool._tls = ssl.create_default_context(cafile=str(cert_file))
        with pytest.raises(DeniedAddress):
            pool.post(receiver.url, b"secret", {})
        # A probe connects after the refusal: the receiver accepts in order, so once it has
        # accepted the probe, any connection of the refused post would be there before it.
        with socket.create_connection(("127.0.0.1", receiver.port)) as probe:
            probe_port = probe.getsockname()[1]
            deadline = time.monotonic() + 10
            while probe_port not in receiver.peer_ports:
                assert time.monotonic() < deadline, "the probe was never accepted"
                time.sleep(0.01)
        assert receiver.peer_ports == [probe_port]
