"""AES-256-GCM of message bodies: the stored form, key rotation, and bodies that only look
encrypted."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from zaqar_delay.encryption import FIELD, MessageCipher, data_dir_key
from zaqar_delay.models import NewMessage

BODY = {"card": "4111-1111-1111-1111", "n": [1, 2.5, None]}


def stored(cipher: MessageCipher, body: object) -> object:
    return json.loads(cipher.encrypt(json.dumps(body)))


def test_round_trip_and_no_plaintext_in_the_stored_form() -> None:
    cipher = MessageCipher("k1")
    sealed = stored(cipher, BODY)
    assert isinstance(sealed, dict) and set(sealed) == {FIELD}
    assert "4111" not in json.dumps(sealed)
    assert cipher.decrypt(sealed) == BODY
    # A fresh nonce each time: equal bodies are not equal at rest.
    assert stored(cipher, BODY) != sealed


def test_an_old_key_still_reads_after_rotation() -> None:
    before = stored(MessageCipher("k1"), BODY)
    rotated = MessageCipher("k2", old=["k1"])
    assert rotated.decrypt(before) == BODY
    after = stored(rotated, BODY)
    assert MessageCipher("k2").decrypt(after) == BODY
    # New bodies use the new key only.
    assert MessageCipher("k1").decrypt(after) == after


def test_a_key_not_configured_leaves_the_stored_form() -> None:
    sealed = stored(MessageCipher("k1"), BODY)
    assert MessageCipher("other").decrypt(sealed) == sealed


@pytest.mark.parametrize(
    "lookalike",
    [
        {FIELD: "v1.00000000.AAAA"},
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
    assert cipher.decrypt(lookalike) == lookalike


def test_a_tampered_body_is_not_decrypted() -> None:
    cipher = MessageCipher("k1")
    sealed = stored(cipher, BODY)
    assert isinstance(sealed, dict)
    token = sealed[FIELD]
    tampered = {FIELD: token[:-4] + ("AAAA" if not token.endswith("AAAA") else "BBBB")}
    assert cipher.decrypt(tampered) == tampered


def test_seal_and_open_messages() -> None:
    cipher = MessageCipher("k1")
    [sealed] = cipher.seal([NewMessage(json.dumps(BODY), 60, 0)])
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
