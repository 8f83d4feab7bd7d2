"""Zaqar's Redis URIs: Sentinel lists with their query options, ``dbid`` on one server, and a
unix socket named by a host-less ``redis://``."""

from __future__ import annotations

import tempfile

import pytest
import redis

from testbed.processes import RedisServer
from zaqar_delay.conf import Settings
from zaqar_delay.errors import StorageConfigError
from zaqar_delay.storage.redis.connect import redis_client, with_zaqar_options
from zaqar_delay.storage.redis.sentinel import (
    SentinelTarget,
    is_sentinel_uri,
    parse_sentinel_uri,
    sentinel_client,
)
from zaqar_delay.storage.uri import open_driver, unix_socket_form


def test_zaqars_sentinel_uri_names_its_sentinels_with_the_default_port() -> None:
    uri = "redis://h1:26380,h2,[::1]:26381,[fe80::2]?master=zd"
    assert is_sentinel_uri(uri)
    assert parse_sentinel_uri(uri) == SentinelTarget(
        sentinels=(("h1", 26380), ("h2", 26379), ("::1", 26381), ("fe80::2", 26379)),
        master="zd",
    )


def test_sentinel_query_options_are_read_as_zaqar_reads_them() -> None:
    uri = (
        "rediss://app:s%40cret@h1:1,h2:2?master=zd&socket_timeout=0.25&dbid=3"
        "&sentinel_username=watch&sentinel_password=pw"
    )
    assert parse_sentinel_uri(uri) == SentinelTarget(
        sentinels=(("h1", 1), ("h2", 2)),
        master="zd",
        tls=True,
        username="app",
        password="s@cret",
        sentinel_username="watch",
        sentinel_password="pw",
        db=3,
        socket_timeout=0.25,
    )
    assert parse_sentinel_uri("redis://:pw@h1?master=zd").password == "pw"
    assert parse_sentinel_uri("redis://:pw@h1?master=zd").username is None


def test_a_sentinel_client_carries_the_options_to_its_connections() -> None:
    client = sentinel_client("redis://:pw@127.0.0.1:1?master=zd&dbid=2&socket_timeout=0.5", 5.0)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["db"], kwargs["password"], kwargs["socket_timeout"]) == (2, "pw", 0.5)
        assert client.connection_pool.max_connections == 64
        assert client.connection_pool.service_name == "zd"
    finally:
        client.close()


@pytest.mark.parametrize(
    ("uri", "reason"),
    [
        ("redis://h1:p1,h2:p2?master=zd", "'h1:p1' is not host[:port]"),
        ("redis://h1:0?master=zd", "'h1:0' is not host[:port]"),
        ("redis://?master=zd", "no Sentinel host"),
        ("redis://h1?master=", "master= names no primary"),
        ("redis://h1?master=zd&dbid=x", "dbid='x'"),
        ("redis://h1?master=zd&dbid=-1", "dbid='-1'"),
        ("redis://h1?master=zd&socket_timeout=0", "socket_timeout='0'"),
    ],
)
def test_a_malformed_sentinel_uri_is_refused_saying_why(uri: str, reason: str) -> None:
    with pytest.raises(StorageConfigError, match="Invalid storage URI") as refused:
        parse_sentinel_uri(uri)
    assert reason in str(refused.value)


def test_several_hosts_without_master_are_refused_naming_the_missing_option() -> None:
    with pytest.raises(StorageConfigError, match="needs master=NAME"):
        open_driver("redis://h1:26379,h2:26379", Settings())


def test_dbid_on_one_server_is_redis_pys_db() -> None:
    assert with_zaqar_options("redis://h:6379?dbid=4&socket_timeout=0.5") == (
        "redis://h:6379?db=4&socket_timeout=0.5"
    )
    assert with_zaqar_options("redis://h:6379/1") == "redis://h:6379/1"
    client = redis_client("redis://127.0.0.1:1?dbid=4&socket_timeout=0.5", 5.0)
    try:
        kwargs = client.connection_pool.connection_kwargs
        assert (kwargs["db"], kwargs["socket_timeout"]) == (4, 0.5)
    finally:
        client.close()


@pytest.mark.parametrize(
    ("uri", "read_as"),
    [
        ("redis:///run/redis.sock", "unix:///run/redis.sock"),
        ("redis://@/run/redis.sock", "unix://@/run/redis.sock"),
        ("redis://:pw@/run/redis.sock?dbid=2", "unix://:pw@/run/redis.sock?dbid=2"),
        ("redis://app:pw@/run/r%20s.sock", "unix://app:pw@/run/r%20s.sock"),
        # Not a socket: a host, a database number on localhost (redis-py's), no path at all,
        # a Sentinel URI, TLS.
        ("redis://h:6379/run/redis.sock", "redis://h:6379/run/redis.sock"),
        ("redis:///1", "redis:///1"),
        ("redis://", "redis://"),
        ("redis://@/run/redis.sock?master=zd", "redis://@/run/redis.sock?master=zd"),
        ("rediss:///run/redis.sock", "rediss:///run/redis.sock"),
    ],
)
def test_a_host_less_redis_uri_is_read_as_zaqar_reads_it(uri: str, read_as: str) -> None:
    assert unix_socket_form(uri) == read_as


def test_zaqars_unix_socket_uri_reaches_that_socket_with_its_password_and_dbid() -> None:
    socket = f"{tempfile.mkdtemp(prefix='zd-sock-')}/redis.sock"
    server = RedisServer(extra_args=["--unixsocket", socket, "--unixsocketperm", "700"]).start()
    try:
        redis.Redis(server.host, server.port).config_set("requirepass", "s3cret")
        driver = open_driver(f"redis://:s3cret@{socket}?dbid=3", Settings())
        try:
            assert driver.create_queue("demo", "reached", {}, 0)
            assert driver.get_metadata("demo", "reached") == {}
        finally:
            driver.close()
        by_db = {
            db: redis.Redis(server.host, server.port, db=db, password="s3cret").keys("zd:*")
            for db in (0, 3)
        }
        assert by_db[3] and not by_db[0]
    finally:
        server.stop()
