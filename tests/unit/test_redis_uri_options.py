"""The query options a Redis URI may carry (``storage/redis/uri_options.py``), read on
standalone, Sentinel and Cluster URIs alike."""

from __future__ import annotations

from pathlib import Path

import pytest

from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.redis.cluster import LazyClusterClient, parse_cluster_uri
from zaqar_delay.storage.redis.connect import redis_client
from zaqar_delay.storage.redis.sentinel import parse_sentinel_uri
from zaqar_delay.storage.redis.uri_options import check_uri, without_refused


@pytest.fixture
def ca(tmp_path: Path) -> str:
    path = tmp_path / "ca.pem"
    path.write_text("not read here")
    return str(path)


def test_tls_options_reach_the_cluster_client(ca: str) -> None:
    uri = (
        f"rediss+cluster://127.0.0.1:7000?ssl_ca_certs={ca}&ssl_certfile={ca}&ssl_keyfile={ca}"
        "&ssl_cert_reqs=optional&ssl_check_hostname=false&ssl_password=pw"
    )
    _, options = parse_cluster_uri(uri)
    assert options == {
        "ssl": True,
        "ssl_ca_certs": ca,
        "ssl_certfile": ca,
        "ssl_keyfile": ca,
        "ssl_cert_reqs": "optional",
        "ssl_check_hostname": False,
        "ssl_password": "pw",
    }


def test_tls_options_reach_the_sentinel_data_nodes(ca: str) -> None:
    target = parse_sentinel_uri(f"rediss://s1,s2?master=zd&ssl_ca_certs={ca}&dbid=2")
    assert target.tls and target.db == 2
    assert target.tls_arguments == {"ssl_ca_certs": ca}


def test_sentinel_tls_reaches_the_sentinels_with_the_same_options(ca: str) -> None:
    target = parse_sentinel_uri(f"rediss://s1?master=zd&ssl_ca_certs={ca}&sentinel_tls=true")
    assert target.sentinel_tls and target.tls_arguments == {"ssl_ca_certs": ca}
    assert not parse_sentinel_uri("rediss://s1?master=zd").sentinel_tls


def test_tls_options_reach_the_standalone_client(ca: str) -> None:
    client = redis_client(f"rediss://127.0.0.1:1/0?ssl_ca_certs={ca}&ssl_cert_reqs=none", 1.0)
    kwargs = client.connection_pool.connection_kwargs
    assert kwargs["ssl_ca_certs"] == ca and kwargs["ssl_cert_reqs"] == "none"


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("redis://h:1/0?protocol=3", "unknown option 'protocol'"),
        ("redis://h:1/0?max_connections=9", "unknown option 'max_connections'"),
        ("redis://h1,h2?master=zd&db=1", "unknown option 'db'"),
        ("redis+cluster://h:1?dbid=1", "unknown option 'dbid'"),
        ("redis://h:1/0?socket_timeout=nan", "socket_timeout='nan' (it must be a number of"),
        ("redis://h:1/0?socket_timeout=inf", "socket_timeout='inf'"),
        ("redis://h:1/0?socket_timeout=0", "socket_timeout='0'"),
        ("redis://h:1/0?socket_timeout=-1", "socket_timeout='-1'"),
        ("redis://h:1/0?dbid=-1", "dbid='-1' (it must be a whole number from 0)"),
        ("unix:///run/r.sock?db=two", "db='two'"),
        ("redis://h1?master=zd&socket_timeout=nan", "socket_timeout='nan'"),
        ("redis+cluster://h:1?socket_timeout=inf", "socket_timeout='inf'"),
        ("redis://h:1/0?ssl_cert_reqs=none", "ssl_cert_reqs is a TLS option; TLS needs rediss"),
        ("unix:///run/r.sock?ssl_ca_certs=/x", "ssl_ca_certs is a TLS option"),
        ("redis+cluster://h:1?ssl_ca_certs=/x", "ssl_ca_certs is a TLS option"),
        ("redis://s1?master=zd&ssl_ca_certs=/x", "ssl_ca_certs is a TLS option"),
        ("redis://s1?master=zd&sentinel_tls=true", "sentinel_tls=true needs rediss://"),
        ("rediss://s1?master=zd&sentinel_tls=on", "sentinel_tls: use true or false"),
        ("rediss://h:1/0?ssl_cert_reqs=maybe", "ssl_cert_reqs='maybe': use none, optional"),
        ("rediss://h:1/0?ssl_check_hostname=yes", "ssl_check_hostname='yes': use true or false"),
        ("rediss://h:1/0?ssl_ca_certs=/no/such/ca.pem", "is no file this server can read"),
        ("rediss+cluster://h:1?ssl_keyfile=/no/key.pem", "is no file this server can read"),
    ],
)
def test_an_option_the_driver_does_not_take_is_refused(uri: str, reason: str) -> None:
    with pytest.raises(StorageConfigError, match="Invalid storage URI") as refused:
        if "+cluster" in uri:
            parse_cluster_uri(uri)
        elif "master=" in uri:
            parse_sentinel_uri(uri)
        else:
            redis_client(uri, 1.0)
    assert reason in str(refused.value)


@pytest.mark.parametrize(
    ("uri", "opened", "dropped"),
    [
        (
            "redis://:pw@h:1/0?health_check_interval=10&dbid=2&max_connections=5",
            "redis://:pw@h:1/0?dbid=2",
            ["health_check_interval", "max_connections"],
        ),
        ("redis+cluster://h:1,h:2?dbid=1", "redis+cluster://h:1,h:2", ["dbid"]),
        (
            "rediss://h:1/0?ssl_ca_certs=/x&protocol=3",
            "rediss://h:1/0?ssl_ca_certs=/x",
            ["protocol"],
        ),
        ("redis://s1?master=zd&ssl_ca_certs=/x", "redis://s1?master=zd", ["ssl_ca_certs"]),
        ("redis://h:1/0?dbid=2", "redis://h:1/0?dbid=2", []),
    ],
)
def test_a_registered_pools_uri_is_opened_without_the_options_now_refused(
    uri: str, opened: str, dropped: list[str]
) -> None:
    assert without_refused(uri) == (opened, dropped)
    check_uri(opened.replace("/x", __file__))  # what is left is taken


@pytest.mark.parametrize(
    "uri",
    [
        "redis://h:1/0?dbid=3&socket_timeout=0.5",
        "unix:///run/redis.sock?db=2",
        "rediss://h:1/0",
    ],
)
def test_zaqars_options_are_taken(uri: str) -> None:
    redis_client(uri, 1.0).close()


def test_a_cluster_uri_s_socket_timeout_replaces_the_configured_one() -> None:
    configured = LazyClusterClient("redis+cluster://127.0.0.1:1", 5.0, 8)
    assert configured._options["socket_timeout"] == 5.0
    given = LazyClusterClient("redis+cluster://127.0.0.1:1?socket_timeout=0.25", 5.0, 8)
    assert given._options["socket_timeout"] == given._options["socket_connect_timeout"] == 0.25
