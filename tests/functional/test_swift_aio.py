"""The Swift all-in-one the Swift driver's tests run on: what the driver's design stands on
(conditional creation, name-ordered listings with markers and prefixes, expiry headers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import requests

from testbed.swift_aio import SwiftAllInOne, missing_binaries

pytestmark = pytest.mark.functional

if missing_binaries():
    pytest.skip(
        f"Swift's servers are needed ({', '.join(missing_binaries())} missing; Debian: apt-get "
        "install swift swift-proxy swift-account swift-container swift-object memcached)",
        allow_module_level=True,
    )


@pytest.fixture(scope="module")
def swift() -> Iterator[SwiftAllInOne]:
    aio = SwiftAllInOne().start()
    yield aio
    aio.stop()


@pytest.fixture
def account(swift: SwiftAllInOne) -> tuple[str, dict[str, str]]:
    """The test account's storage URL, and the headers that carry its token."""
    found = swift.token()
    assert found is not None
    url, token = found
    return url, {"X-Auth-Token": token}


def test_tempauth_gives_a_token_and_objects_are_created_only_once(
    account: tuple[str, dict[str, str]],
) -> None:
    url, auth = account
    assert requests.put(f"{url}/once", headers=auth, timeout=10).status_code == 201
    create = {**auth, "If-None-Match": "*"}
    first = requests.put(f"{url}/once/claim-1", data=b"a", headers=create, timeout=10)
    assert first.status_code == 201
    again = requests.put(f"{url}/once/claim-1", data=b"b", headers=create, timeout=10)
    assert again.status_code == 412  # the second creator is refused
    assert requests.get(f"{url}/once/claim-1", headers=auth, timeout=10).content == b"a"
    assert requests.get(f"{url}/once/claim-1", timeout=10).status_code == 401  # no token


def test_listings_are_in_name_order_with_marker_end_marker_and_prefix(
    account: tuple[str, dict[str, str]],
) -> None:
    url, auth = account
    assert requests.put(f"{url}/due", headers=auth, timeout=10).status_code == 201
    names = [f"q1/{due:013d}-{n}" for n, due in enumerate((300, 100, 200))] + ["q2/0000000000050-x"]
    for name in names:
        assert requests.put(f"{url}/due/{name}", data=b"", headers=auth, timeout=10).ok

    def listed(**params: str) -> list[str]:
        answer = requests.get(
            f"{url}/due", params={"format": "json", **params}, headers=auth, timeout=10
        )
        return [entry["name"] for entry in answer.json()]

    assert listed(prefix="q1/") == sorted(names[:3])
    assert listed(prefix="q1/", marker="q1/0000000000100-1") == sorted(names[:3])[1:]
    assert listed(prefix="q1/", end_marker="q1/0000000000250") == sorted(names[:3])[:2]


def test_an_object_can_carry_its_expiry(account: tuple[str, dict[str, str]]) -> None:
    url, auth = account
    assert requests.put(f"{url}/expiring", headers=auth, timeout=10).status_code == 201
    stored = requests.put(
        f"{url}/expiring/m", data=b"x", headers={**auth, "X-Delete-After": "3600"}, timeout=10
    )
    assert stored.status_code == 201
    head = requests.head(f"{url}/expiring/m", headers=auth, timeout=10)
    assert int(head.headers["X-Delete-At"]) > 0
