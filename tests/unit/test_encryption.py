"""AES-256-GCM of message bodies: the stored form, key rotation, and bodies that only look
encrypted."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from zaqar_delay.encryption import FIELD, Legacy, MessageCipher, data_dir_key, has_sealed_form
from zaqar_delay.models import NewMessage

BODY = {"card": "4111-1111-1111-1111", "n": [1, 2.5, None]}


P, Q = "p1", "q1"


def stored(cipher: MessageCipher, body: object, project: str = P, queue: str = Q) -> object:
    return json.loads(cipher.encrypt(json.dumps(body), project, queue))


def test_round_trip_and_no_plaintext_in_the_stored_form() -> None:
    cipher = MessageCipher("k1")
    sealed = stored(cipher, BODY)
    assert isinstance(sealed, dict) and set(sealed) == {FIELD}
    assert "4111" not in json.dumps(sealed)
    assert cipher.decrypt(sealed, P) == BODY
    # A fresh nonce each time: equal bodies are not equal at rest.
    assert stored(cipher, BODY) != sealed


def test_an_old_key_still_reads_after_rotation() -> None:
    before = stored(MessageCipher("k1"), BODY)
    rotated = MessageCipher("k2", old=["k1"])
    assert rotated.decrypt(before, P) == BODY
    after = stored(rotated, BODY)
    assert MessageCipher("k2").decrypt(after, P) == BODY
    # New bodies use the new key only.
    assert MessageCipher("k1").decrypt(after, P) == after


def test_a_key_not_configured_leaves_the_stored_form() -> None:
    sealed = stored(MessageCipher("k1"), BODY)
    assert MessageCipher("other").decrypt(sealed, P) == sealed


@pytest.mark.parametrize(
    "lookalike",
    [
        {FIELD: "v1.00000000.AAAA"},
        {FIELD: "v2.00000000.q.AAAA"},
        {FIELD: "not-a-token"},
        {FIELD: 42},
        {FIELD: "v1.x", "other": 1},
        "plain",
        [1, 2],
        None,
    ],
)
def test_bodies_that_look_encrypted_are_returned_as_posted(lookalike: object) -> None:
    cipher = MessageCipher("k1")
    assert cipher.decrypt(lookalike, P) == lookalike


def test_a_tampered_body_is_not_decrypted() -> None:
    cipher = MessageCipher("k1")
    sealed = stored(cipher, BODY)
    assert isinstance(sealed, dict)
    token = sealed[FIELD]
    tampered = {FIELD: token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")}
    assert cipher.decrypt(tampered, P) == tampered


def test_seal_and_open_messages() -> None:
    cipher = MessageCipher("k1")
    [sealed] = cipher.seal([NewMessage(json.dumps(BODY), 60, 0)], P, Q)
    assert "4111" not in sealed.body_json


def test_empty_key_is_refused() -> None:
    with pytest.raises(ValueError):
        MessageCipher("")


def test_data_dir_key_is_made_once_and_private(tmp_path: Path) -> None:
    first = data_dir_key(str(tmp_path))
    assert len(first) == 64
    path = tmp_path / "message-encryption.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert data_dir_key(str(tmp_path)) == first
    assert [p.name for p in tmp_path.iterdir()] == [path.name]


def legacy_seal(passphrase: str, body: object) -> dict[str, str]:
    """A body as earlier releases sealed it: ``v1``, no associated data."""
    key = hashlib.sha256(passphrase.encode()).digest()
    nonce = os.urandom(12)
    sealed = AESGCM(key).encrypt(nonce, json.dumps(body).encode(), None)
    key_id = hashlib.sha256(b"zaqar-delay key id\0" + key).hexdigest()[:8]
    return {FIELD: f"v1.{key_id}.{base64.urlsafe_b64encode(nonce + sealed).decode()}"}


def test_a_seal_opens_for_its_own_project_only() -> None:
    cipher = MessageCipher("k1")
    sealed = stored(cipher, BODY, "victim", "orders")
    assert cipher.decrypt(sealed, "victim") == BODY
    # Copied into another project's queue (from a backup or a replica): it stays sealed.
    assert cipher.decrypt(sealed, "attacker") == sealed
    # The queue it names is part of what was authenticated: renaming it breaks the seal.
    assert isinstance(sealed, dict)
    renamed = {FIELD: sealed[FIELD].replace(".orders.", ".other.")}
    assert cipher.decrypt(renamed, "victim") == renamed


def test_an_earlier_releases_seal_opens_only_where_the_queue_encrypts() -> None:
    cipher = MessageCipher("k1")
    old = legacy_seal("k1", BODY)
    assert cipher.decrypt(old, P) == old
    assert cipher.decrypt(old, P, Legacy(lambda: False)) == old
    assert cipher.decrypt(old, P, Legacy(lambda: True)) == BODY


def test_the_legacy_question_is_asked_only_for_a_legacy_seal_and_once() -> None:
    cipher = MessageCipher("k1")
    asked: list[int] = []

    def encrypts() -> bool:
        asked.append(1)
        return True

    legacy = Legacy(encrypts)
    current = stored(cipher, BODY)
    assert cipher.decrypt(current, P, legacy) == BODY
    assert asked == []
    old = legacy_seal("k1", BODY)
    assert cipher.decrypt(old, P, legacy) == BODY
    assert cipher.decrypt(old, P, legacy) == BODY
    assert asked == [1]


def test_the_sealed_form() -> None:
    assert has_sealed_form({FIELD: "anything"})
    assert not has_sealed_form({FIELD: "x", "other": 1})
    assert not has_sealed_form({FIELD: 1})
    assert not has_sealed_form("x")
