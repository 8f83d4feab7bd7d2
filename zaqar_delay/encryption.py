"""Message bodies encrypted at rest (queues with ``_enable_encrypt_messages``): AES-256-GCM.

A body is stored as the JSON object ``{"_zd_enc": "v2.<key id>.<queue>.<nonce and
ciphertext>"}`` so that every driver stores and returns it like any other body. The seal's
associated data is the project and the queue it was sealed for, so a sealed body opens only
for that project: one copied into another project's queue (from a backup or a replica) fails
GCM's authentication there and is returned as stored. The queue travels in the token because
a dead-letter move carries the sealed body, unchanged, to another queue of the project.

Bodies of this form are the service's alone: a post or an edit whose body has that form is
refused (``validation``), so no client can have a sealed body of its choosing opened. Bodies
sealed by earlier releases (``v1``, no associated data) are opened only in queues that
encrypt now. A body that only looks sealed fails to open and is returned as it was stored,
never misread.

Keys are configured passphrases (``[transport] message_encryption_key``, and older ones in
``message_encryption_old_keys`` for reading after a rotation); the AES key is the SHA-256 of
the passphrase. The embedded store generates one in its data directory on first start.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import functools
import hashlib
import json
import os
import secrets
from collections.abc import Callable, Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from zaqar_delay import errors
from zaqar_delay.models import Claim, Delivery, Message, NewMessage
from zaqar_delay.policy import QueuePolicy

FIELD = "_zd_enc"
VERSION = "v2"  # associated data: the project and the queue
LEGACY_VERSION = "v1"  # no associated data (earlier releases)
NONCE_BYTES = 12
KEY_FILE = "message-encryption.key"


def _aes_key(passphrase: str) -> bytes:
    return hashlib.sha256(passphrase.encode()).digest()


def _key_id(aes_key: bytes) -> str:
    """A short public name of a key, so reading picks the right one without trying all."""
    return hashlib.sha256(b"zaqar-delay key id\0" + aes_key).hexdigest()[:8]


def has_sealed_form(body: Any) -> bool:
    """Whether ``body`` has the form of a sealed body (whether or not it would open)."""
    return type(body) is dict and len(body) == 1 and type(body.get(FIELD)) is str


def _associated_data(project: str, queue: str) -> bytes:
    return b"zaqar-delay message\0" + project.encode() + b"\0" + queue.encode()


class Legacy:
    """Whether bodies sealed by earlier releases may open: asked at most once, and only when
    such a body is met (the answer costs a read of the queue's metadata)."""

    def __init__(self, encrypts: Callable[[], bool]) -> None:
        self._encrypts = encrypts
        self._answer: bool | None = None

    def __bool__(self) -> bool:
        if self._answer is None:
            self._answer = self._encrypts()
        return self._answer


NO_LEGACY = Legacy(lambda: False)


class MessageCipher:
    """Encrypts bodies with the current key; decrypts with it or any older one."""

    def __init__(self, current: str, old: Sequence[str] = ()) -> None:
        if not current:
            raise ValueError("an encryption key may not be empty")
        self._current = _aes_key(current)
        self._current_id = _key_id(self._current)
        self._keys = {_key_id(k): AESGCM(k) for k in [self._current, *map(_aes_key, old)]}
        self._encryptor = AESGCM(self._current)

    def encrypt(self, body_json: str, project: str, queue: str) -> str:
        """The stored form (JSON text) of a body given as JSON text, sealed for ``queue`` of
        ``project``."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self._encryptor.encrypt(
            nonce, body_json.encode(), _associated_data(project, queue)
        )
        token = base64.urlsafe_b64encode(nonce + sealed).decode()
        field = f"{VERSION}.{self._current_id}.{queue}.{token}"
        return json.dumps({FIELD: field}, separators=(",", ":"))

    def decrypt(self, body: Any, project: str, legacy: Legacy = NO_LEGACY) -> Any:
        """The body a client posted, if ``body`` is one this cipher's keys sealed for a queue
        of ``project`` (or, when ``legacy`` holds, sealed by an earlier release); else
        ``body`` unchanged (not sealed, sealed for another project, or with a key not
        configured)."""
        if not has_sealed_form(body):
            return body
        version, _, rest = body[FIELD].partition(".")
        key_id, _, rest = rest.partition(".")
        key = self._keys.get(key_id)
        if key is None:
            return body
        if version == VERSION:
            queue, _, token = rest.partition(".")
            associated: bytes | None = _associated_data(project, queue)
        elif version == LEGACY_VERSION and legacy:
            token, associated = rest, None
        else:
            return body
        with contextlib.suppress(binascii.Error, ValueError, InvalidTag):
            raw = base64.urlsafe_b64decode(token)
            return json.loads(key.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], associated))
        return body

    def seal(self, messages: Sequence[NewMessage], project: str, queue: str) -> list[NewMessage]:
        """Messages as the encrypted ``queue`` of ``project`` stores them."""
        return [
            dataclasses.replace(m, body_json=self.encrypt(m.body_json, project, queue))
            for m in messages
        ]

    def open(
        self, messages: tuple[Message, ...], project: str, legacy: Legacy = NO_LEGACY
    ) -> tuple[Message, ...]:
        """Messages of a queue of ``project`` as clients see them: bodies this cipher sealed
        decrypted, others as they are (a message of an unencrypted queue costs one type
        check). ``messages`` itself when nothing was sealed."""
        opened, changed = [], False
        for message in messages:
            body = self.decrypt(message.body, project, legacy)
            if body is not message.body:
                message, changed = dataclasses.replace(message, body=body), True
            opened.append(message)
        return tuple(opened) if changed else messages


class QueueEncryption:
    """Encryption as queues see it: which queues seal their bodies, and bodies opened for
    clients. Without a cipher (no key configured) a queue cannot ask for encryption."""

    def __init__(self, cipher: MessageCipher | None) -> None:
        self.cipher = cipher

    def for_queue(self, policy: QueuePolicy, seal: bool = False) -> MessageCipher | None:
        """The cipher of a queue with this policy: None if it does not ask for encryption
        (nor ``seal``: messages that come from a queue that does); InvalidRequest if it does
        and no key is configured."""
        if not policy.encrypt_messages:
            return self.cipher if seal else None
        if self.cipher is None:
            raise errors.InvalidRequest(
                "_enable_encrypt_messages needs a key: set [transport] message_encryption_key "
                "in the server's configuration."
            )
        return self.cipher

    def open(
        self, messages: Sequence[Message], project: str, encrypts: Callable[[], bool]
    ) -> tuple[Message, ...]:
        """Messages of a queue of ``project`` as clients see them: sealed bodies decrypted.
        ``encrypts()`` says whether the queue encrypts now (asked only when a body sealed by
        an earlier release is met: those open only there)."""
        messages = tuple(messages)  # the same tuple when it is one
        if self.cipher is None:
            return messages
        return self.cipher.open(messages, project, Legacy(encrypts))

    def open_deliveries(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Pushes as their subscribers are sent them: bodies of encrypted queues decrypted."""
        if self.cipher is None:
            return list(deliveries)
        cipher = self.cipher
        opened = []
        for delivery in deliveries:
            encrypts = QueuePolicy.of(delivery.queue_metadata).encrypt_messages
            legacy = Legacy(functools.partial(bool, encrypts))
            body = cipher.decrypt(delivery.message.body, delivery.project, legacy)
            if body is not delivery.message.body:
                message = dataclasses.replace(delivery.message, body=body)
                delivery = dataclasses.replace(delivery, message=message)
            opened.append(delivery)
        return opened

    def open_claim(self, claim: Claim, project: str, encrypts: Callable[[], bool]) -> Claim:
        """A claim as its client sees it (itself when no body was sealed)."""
        messages = self.open(claim.messages, project, encrypts)
        if messages is claim.messages:
            return claim
        return dataclasses.replace(claim, messages=messages)


def data_dir_key(directory: str) -> str:
    """The key kept in ``directory`` (the embedded store's), made on first use, mode 0600."""
    path = os.path.join(directory, KEY_FILE)
    if not os.path.exists(path):
        # Written whole under another name, then linked into place: a server starting at the
        # same moment reads either no file or the complete key, and both end up with one key.
        draft = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(secrets.token_hex(32) + "\n")
            with contextlib.suppress(FileExistsError):
                os.link(draft, path)
        finally:
            os.unlink(draft)
    with open(path) as f:
        key = f.read().strip()
    if not key:
        raise ValueError(f"the message encryption key file {path} is empty")
    return key
