"""Message bodies encrypted at rest (queues with ``_enable_encrypt_messages``): AES-256-GCM.

A body is stored as the JSON object ``{"_zd_enc": "v1.<key id>.<nonce and ciphertext>"}`` so
that every driver stores and returns it like any other body. Reading decrypts a body of that
shape with the key its id names; a body that only looks like one (a client may post anything)
fails GCM's authentication and is returned as it was stored, never misread.

Keys are configured passphrases (``[transport] message_encryption_key``, and older ones in
``message_encryption_old_keys`` for reading after a rotation); the AES key is the SHA-256 of
the passphrase. The embedded store generates one in its data directory on first start.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import dataclasses
import hashlib
import json
import os
import secrets
from collections.abc import Sequence
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from zaqar_delay import errors
from zaqar_delay.models import Claim, Delivery, Message, NewMessage
from zaqar_delay.policy import QueuePolicy

FIELD = "_zd_enc"
VERSION = "v1"
NONCE_BYTES = 12
KEY_FILE = "message-encryption.key"


def _aes_key(passphrase: str) -> bytes:
    return hashlib.sha256(passphrase.encode()).digest()


def _key_id(aes_key: bytes) -> str:
    """A short public name of a key, so reading picks the right one without trying all."""
    return hashlib.sha256(b"zaqar-delay key id\0" + aes_key).hexdigest()[:8]


class MessageCipher:
    """Encrypts bodies with the current key; decrypts with it or any older one."""

    def __init__(self, current: str, old: Sequence[str] = ()) -> None:
        if not current:
            raise ValueError("an encryption key may not be empty")
        self._current = _aes_key(current)
        self._current_id = _key_id(self._current)
        self._keys = {_key_id(k): AESGCM(k) for k in [self._current, *map(_aes_key, old)]}
        self._encryptor = AESGCM(self._current)

    def encrypt(self, body_json: str) -> str:
        """The stored form (JSON text) of a body given as JSON text."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self._encryptor.encrypt(nonce, body_json.encode(), None)
        token = base64.urlsafe_b64encode(nonce + sealed).decode()
        return json.dumps({FIELD: f"{VERSION}.{self._current_id}.{token}"}, separators=(",", ":"))

    def decrypt(self, body: Any) -> Any:
        """The body a client posted, if ``body`` is one this cipher's keys sealed; else
        ``body`` unchanged (not encrypted, or sealed with a key not configured)."""
        if not (type(body) is dict and len(body) == 1 and type(body.get(FIELD)) is str):
            return body
        version, _, rest = body[FIELD].partition(".")
        key_id, _, token = rest.partition(".")
        key = self._keys.get(key_id)
        if version != VERSION or key is None:
            return body
        with contextlib.suppress(binascii.Error, ValueError, InvalidTag):
            raw = base64.urlsafe_b64decode(token)
            return json.loads(key.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], None))
        return body

    def seal(self, messages: Sequence[NewMessage]) -> list[NewMessage]:
        """Messages as an encrypted queue stores them."""
        return [dataclasses.replace(m, body_json=self.encrypt(m.body_json)) for m in messages]

    def open(self, messages: tuple[Message, ...]) -> tuple[Message, ...]:
        """Messages as clients see them: bodies this cipher sealed decrypted, others as
        they are (a message of an unencrypted queue costs one type check). ``messages``
        itself when nothing was sealed."""
        opened, changed = [], False
        for message in messages:
            body = self.decrypt(message.body)
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

    def open(self, messages: Sequence[Message]) -> tuple[Message, ...]:
        """Messages as clients see them: bodies of encrypted queues decrypted."""
        messages = tuple(messages)  # the same tuple when it is one
        return messages if self.cipher is None else self.cipher.open(messages)

    def open_deliveries(self, deliveries: Sequence[Delivery]) -> list[Delivery]:
        """Pushes as their subscribers are sent them: bodies of encrypted queues decrypted."""
        opened = self.open(tuple(delivery.message for delivery in deliveries))
        return [
            delivery
            if message is delivery.message
            else dataclasses.replace(delivery, message=message)
            for delivery, message in zip(deliveries, opened, strict=True)
        ]

    def open_claim(self, claim: Claim) -> Claim:
        """A claim as its client sees it (itself when no body was sealed)."""
        messages = self.open(claim.messages)
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
