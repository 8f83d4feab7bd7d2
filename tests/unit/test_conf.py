"""Configuration: the sample in etc/ is current, files and the environment are read."""

from __future__ import annotations

import dataclasses
import pathlib
import re
import subprocess
import sys

import pytest

from zaqar_delay.conf import (
    GROUPS,
    STORAGE_URI_ENV,
    Limits,
    Settings,
    load_settings,
    settings_from_command_line,
)
from zaqar_delay.conf.drivers import ZaqarDrivers

ROOT = pathlib.Path(__file__).resolve().parents[2]


def generate(code: str, config: str, output: pathlib.Path) -> str:
    """Run a generator (Python ``code`` reading ``sys.argv``) on ``etc/<config>``, writing
    ``output``; what it wrote."""
    subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "--config-file",
            str(ROOT / "etc" / config),
            "--output-file",
            str(output),
        ],
        check=True,
    )
    return output.read_text()


def test_sample_config_is_generated_from_the_options(tmp_path: pathlib.Path) -> None:
    generated = generate(
        "import sys; from oslo_config.generator import main; main(sys.argv[1:])",
        "zaqar-delay-config-generator.conf",
        tmp_path / "sample.conf",
    )
    committed = (ROOT / "etc" / "zaqar-delay.conf.sample").read_text()
    assert generated == committed, "run: tox -e genconfig"


def test_sample_policy_is_generated_from_the_rules(tmp_path: pathlib.Path) -> None:
    generated = generate(
        "import sys; from oslo_policy.generator import generate_sample; "
        "generate_sample(sys.argv[1:])",
        "zaqar-delay-policy-generator.conf",
        tmp_path / "policy.yaml",
    )
    committed = (ROOT / "etc" / "policy.yaml.sample").read_text()
    assert generated == committed, "run: tox -e genpolicy"
    assert '#"claims:create": "role:member and project_id:%(project_id)s"' in committed


def test_defaults() -> None:
    settings = load_settings([], environ={})
    assert (settings.server.bind, settings.server.workers, settings.storage.uri) == (
        "127.0.0.1:8888",
        2,
        "",
    )
    assert settings.limits.max_message_delay == 900
    assert settings.limits.max_messages_per_page == 20


def test_file_and_environment(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text(
        "[storage]\nuri = redis://127.0.0.1:6379/1\n[transport]\nmax_message_delay = 60\n"
    )
    settings = load_settings([str(conf)], environ={})
    assert settings.storage.uri == "redis://127.0.0.1:6379/1"
    assert settings.limits.max_message_delay == 60
    overridden = load_settings([str(conf)], environ={STORAGE_URI_ENV: "unix:///tmp/r.sock"})
    assert overridden.storage.uri == "unix:///tmp/r.sock"


POOLED = "[DEFAULT]\npooling = true\n"
MANAGED_BY_REDIS = "[drivers]\nmanagement_store = redis\n"


@pytest.mark.parametrize(
    ("zaqar_conf", "uri"),
    [
        (
            "[drivers]\nmessage_store = redis\n"
            "[drivers:message_store:redis]\nuri = redis://:pw@/run/redis.sock?dbid=2\n"
            "[drivers:message_store:mongodb]\nuri = mongodb://elsewhere:27017\n",
            "redis://:pw@/run/redis.sock?dbid=2",
        ),
        ("[drivers]\nmessage_store = redis\n", "redis://127.0.0.1:6379"),  # Zaqar's default
        ("[drivers:message_store:mongodb]\nuri = mongodb://db:27017\n", "mongodb://db:27017"),
        (
            "[drivers]\nmessage_store = swift\n"
            "[drivers:message_store:swift]\nuri = swift://u:p@/proj\nauth_url = http://k/v3\n",
            "swift://u:p@/proj",
        ),
        # Zaqar's options naming no store, and the Redis default without message_store.
        ("[drivers:message_store:redis]\nuri = redis://unused:6379\n", ""),
        ("", ""),
        # A pooled layout naming only its management store keeps the catalog there.
        (
            POOLED + MANAGED_BY_REDIS + "[drivers:management_store:redis]\nuri = redis://m:6379\n",
            "redis://m:6379",
        ),
        (POOLED + MANAGED_BY_REDIS, "redis://127.0.0.1:6379"),  # Zaqar's default
        (  # Zaqar's default driver: a MongoDB uri alone names it.
            POOLED + "[drivers:management_store:mongodb]\nuri = mongodb://m:27017\n",
            "mongodb://m:27017",
        ),
        (  # The message store, where one is named, keeps the catalog as before.
            POOLED
            + "[drivers:management_store:mongodb]\nuri = mongodb://m:27017\n"
            + "[drivers:message_store:mongodb]\nuri = mongodb://data:27017\n",
            "mongodb://data:27017",
        ),
        # Unpooled, there is no catalog: the management store is not read.
        ("[drivers:management_store:mongodb]\nuri = mongodb://m:27017\n", ""),
        ("[drivers]\nmanagement_store = sqlalchemy\n", ""),
    ],
)
def test_zaqars_drivers_layout_names_the_store(
    tmp_path: pathlib.Path, zaqar_conf: str, uri: str
) -> None:
    conf = tmp_path / "zaqar.conf"
    conf.write_text(zaqar_conf)
    assert load_settings([str(conf)], environ={}).storage.uri == uri
    # [storage] uri, and the environment over it, win over Zaqar's options.
    conf.write_text(zaqar_conf + "[storage]\nuri = redis://ours:6379/0\n")
    assert load_settings([str(conf)], environ={}).storage.uri == "redis://ours:6379/0"
    chosen = load_settings([str(conf)], environ={STORAGE_URI_ENV: "unix:///tmp/env.sock"})
    assert chosen.storage.uri == "unix:///tmp/env.sock"


@pytest.mark.parametrize(
    ("zaqar_conf", "refusal", "mended_by_storage_uri"),
    [
        (
            "[drivers]\nmessage_store = mongodb\n",
            "needs [drivers:message_store:mongodb] uri",
            True,
        ),
        ("[drivers]\nmessage_store = swift\n", "needs [drivers:message_store:swift] uri", True),
        ("[drivers]\nmessage_store = sqlalchemy\n", "message_store", False),  # Zaqar's too
        (  # A pooled layout whose catalog store cannot be used.
            POOLED + "[drivers]\nmanagement_store = sqlalchemy\n"
            "[drivers:management_store:sqlalchemy]\nuri = mysql+pymysql://z@db/zaqar\n",
            "management_store = sqlalchemy: zaqar-delay keeps the pool catalog in Redis",
            True,
        ),
        (
            POOLED + "[drivers]\nmanagement_store = mongodb\n",
            "needs [drivers:management_store:mongodb] uri",
            True,
        ),
    ],
)
def test_zaqars_drivers_layout_naming_no_store_is_refused(
    tmp_path: pathlib.Path, zaqar_conf: str, refusal: str, mended_by_storage_uri: bool
) -> None:
    conf = tmp_path / "zaqar.conf"
    conf.write_text(zaqar_conf)
    with pytest.raises(Exception, match=re.escape(refusal)):
        load_settings([str(conf)], environ={})
    if mended_by_storage_uri:  # a store of zaqar-delay's own: nothing left to refuse
        conf.write_text(zaqar_conf + "[storage]\nuri = redis://ours:6379/0\n")
        assert load_settings([str(conf)], environ={}).storage.uri == "redis://ours:6379/0"


@pytest.mark.parametrize(
    ("wsgi", "bind"),
    [
        ("bind = 0.0.0.0\nport = 9000\n", "0.0.0.0:9000"),
        ("port = 9000\n", "127.0.0.1:9000"),
        ("bind = ::1\n", "[::1]:8888"),
    ],
)
def test_zaqars_wsgi_address_is_read_unless_server_bind_is_set(
    tmp_path: pathlib.Path, wsgi: str, bind: str
) -> None:
    conf = tmp_path / "zaqar.conf"
    conf.write_text(f"[drivers:transport:wsgi]\n{wsgi}")
    assert load_settings([str(conf)], environ={}).server.bind == bind
    conf.write_text(f"[drivers:transport:wsgi]\n{wsgi}[server]\nbind = 127.0.0.1:8888\n")
    assert load_settings([str(conf)], environ={}).server.bind == "127.0.0.1:8888"
    from_command_line = settings_from_command_line(
        ["--config-file", str(conf.with_name("zaqar.conf")), "--bind", "127.0.0.1:7000"], "zd", ""
    )
    assert from_command_line.server.bind == "127.0.0.1:7000"


@pytest.mark.parametrize(
    ("content", "strategy"),
    [
        ("[DEFAULT]\nauth_strategy = keystone\n", "keystone"),
        ("[DEFAULT]\nauth_strategy =\n", "noauth"),  # Zaqar's empty value
        ("[DEFAULT]\nauth_strategy = keystone\n[server]\nauth_strategy = noauth\n", "noauth"),
        ("[server]\nauth_strategy = keystone\n", "keystone"),
        ("", "noauth"),
    ],
)
def test_zaqars_default_group_auth_strategy_is_read(
    tmp_path: pathlib.Path, content: str, strategy: str
) -> None:
    conf = tmp_path / "zaqar.conf"
    conf.write_text(content)
    assert load_settings([str(conf)], environ={}).server.auth_strategy == strategy


def test_zaqars_default_group_unreliable_is_read(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text("[DEFAULT]\nunreliable = true\n")
    assert load_settings([str(conf)], environ={}).storage.unreliable is True
    assert load_settings([], environ={}).storage.unreliable is False


def test_zaqars_old_name_of_pooling_is_read(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text("[DEFAULT]\nsharding = true\n")
    assert load_settings([str(conf)], environ={}).pooling is True
    assert load_settings([], environ={}).pooling is False


def test_replica_acks_are_read_and_bounded(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text("[storage]\nreplica_acks = 2\nreplica_ack_timeout = 0.5\n")
    settings = load_settings([str(conf)], environ={})
    assert (settings.storage.replica_acks, settings.storage.replica_ack_timeout) == (2, 0.5)
    conf.write_text("[storage]\nreplica_acks = -1\n")
    with pytest.raises(Exception, match="replica_acks"):
        load_settings([str(conf)], environ={})


def test_max_message_ttl_is_at_most_what_a_stored_message_keeps(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text("[transport]\nmax_message_ttl = 4294967295\n")
    assert load_settings([str(conf)], environ={}).limits.max_message_ttl == 2**32 - 1
    conf.write_text("[transport]\nmax_message_ttl = 4294967296\n")
    with pytest.raises(Exception, match="max_message_ttl"):
        load_settings([str(conf)], environ={})


def test_invalid_value_is_refused(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text("[server]\nworkers = 0\n")
    with pytest.raises(Exception, match="workers"):
        load_settings([str(conf)], environ={})


def test_dataclass_defaults_are_the_declared_option_defaults() -> None:
    # Settings() is what tests and embedders build; load_settings what the server reads.
    assert Settings() == load_settings([], environ={})


def test_every_option_fills_exactly_one_settings_field() -> None:
    # Settings holds one settings object per option group, and [DEFAULT]'s options; Zaqar's
    # [drivers] layout is read into [storage] uri and [server] bind.
    groups = [
        field.default_factory
        for field in dataclasses.fields(Settings)
        if field.default_factory is not dataclasses.MISSING
    ]
    assert Limits in groups
    declared = [
        (field.metadata["option"].group, field.metadata["option"].dest)
        for cls in (Settings, *groups, ZaqarDrivers)
        for field in dataclasses.fields(cls)
        if "option" in field.metadata
    ]
    registered = [(group, opt.dest) for group, opts in GROUPS.items() for opt in opts]
    assert sorted(declared) == sorted(registered)
    assert len(set(declared)) == len(declared)


def test_configured_values_reach_their_fields_converted(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text(
        "[journal]\nmax_file_size = 3\n"
        "[notification]\ndenied_networks = 10.0.0.0/8,192.168.0.0/16\n"
        "[transport]\nsubscriber_types = http\nmessage_encryption_old_keys = a,b\n"
        "[signed_url]\nsecret_key = s3cret\n"
    )
    settings = load_settings([str(conf)], environ={})
    assert settings.journal.max_bytes == 3 * 1024 * 1024
    assert settings.notification.denied_networks == ("10.0.0.0/8", "192.168.0.0/16")
    assert settings.limits.subscriber_types == ("http",)
    assert settings.encryption.old_keys == ("a", "b")
    assert settings.signed_url.secret_key == "s3cret"
    # The defaults of a field and of its option are one value.
    assert Settings().journal.max_bytes == 64 * 1024 * 1024
    assert Settings().limits == Limits() == load_settings([], environ={}).limits
