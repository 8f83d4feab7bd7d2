"""Configuration: the sample in etc/ is current, files and the environment are read."""

from __future__ import annotations

import dataclasses
import pathlib
import subprocess
import sys

import pytest

from zaqar_delay.conf import GROUPS, STORAGE_URI_ENV, Limits, Settings, load_settings

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


def test_invalid_value_is_refused(tmp_path: pathlib.Path) -> None:
    conf = tmp_path / "z.conf"
    conf.write_text("[server]\nworkers = 0\n")
    with pytest.raises(Exception, match="workers"):
        load_settings([str(conf)], environ={})


def test_dataclass_defaults_are_the_declared_option_defaults() -> None:
    # Settings() is what tests and embedders build; load_settings what the server reads.
    assert Settings() == load_settings([], environ={})


def test_every_option_fills_exactly_one_settings_field() -> None:
    # Settings holds one settings object per option group, and [DEFAULT]'s options.
    groups = [
        field.default_factory
        for field in dataclasses.fields(Settings)
        if field.default_factory is not dataclasses.MISSING
    ]
    assert Limits in groups
    declared = [
        (field.metadata["option"].group, field.metadata["option"].dest)
        for cls in (Settings, *groups)
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
