"""etc/gunicorn.conf.py gives an external gunicorn exactly zaqar-delay-server's settings."""

from __future__ import annotations

from pathlib import Path

import pytest
from gunicorn.config import Config

from zaqar_delay.cmd import gunicorn_defaults
from zaqar_delay.conf import load_settings

CONF = Path(__file__).resolve().parents[2] / "etc" / "gunicorn.conf.py"


def gunicorn_reads(path: Path) -> Config:
    """What gunicorn's own loader makes of a configuration file."""
    namespace: dict[str, object] = {"__file__": str(path)}
    exec(compile(path.read_text(), str(path), "exec"), namespace)  # as gunicorn does
    config = Config()
    for key, value in namespace.items():
        if key in config.settings:
            config.set(key, value)
    return config


@pytest.mark.parametrize("workers", [None, 5])
def test_the_file_applies_the_servers_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int | None
) -> None:
    config_files: list[str] = []
    if workers is not None:
        ini = tmp_path / "zaqar-delay.conf"
        ini.write_text(
            f"[server]\nworkers = {workers}\nbind = 127.0.0.1:9999\ntransfer_timeout = 7\n"
            "max_unsent_responses = 9\n"
        )
        monkeypatch.setenv("ZAQAR_DELAY_CONFIG_FILE", str(ini))
        config_files = [str(ini)]
    else:
        monkeypatch.delenv("ZAQAR_DELAY_CONFIG_FILE", raising=False)
    expected = gunicorn_defaults.options(load_settings(config_files))
    config = gunicorn_reads(CONF)
    for key, value in expected.items():
        if key in config.settings:
            assert config.settings[key].get() == config.settings[key].validator(value), key
    assert config.workers == (workers or 2)
    assert config.worker_class.transfer_s == (7 if workers else 60)
    assert config.worker_class.unsent_mib == (9 if workers else 128)


def test_the_websocket_port_is_a_second_bind(tmp_path: Path) -> None:
    conf = tmp_path / "zaqar-delay.conf"
    conf.write_text("[server]\nbind = 127.0.0.1:8888\n")
    assert gunicorn_defaults.options(load_settings([str(conf)]))["bind"] == ["127.0.0.1:8888"]
    conf.write_text("[server]\nbind = 127.0.0.1:8888\n[drivers:transport:websocket]\nport = 9000\n")
    assert gunicorn_defaults.options(load_settings([str(conf)]))["bind"] == [
        "127.0.0.1:8888",
        "127.0.0.1:9000",
    ]
    conf.write_text(
        "[server]\nbind = 127.0.0.1:8888\n[drivers:transport:websocket]\nport = 9000\n"
        "bind = 0.0.0.0\n"
    )
    binds = gunicorn_defaults.options(load_settings([str(conf)]))["bind"]
    assert binds == ["127.0.0.1:8888", "0.0.0.0:9000"]


@pytest.mark.parametrize(("push_timeout", "graceful"), [(None, 15), (30.5, 36), (0.5, 10)])
def test_a_stopping_worker_is_given_the_push_timeout_and_a_margin(
    tmp_path: Path, push_timeout: float | None, graceful: int
) -> None:
    conf = tmp_path / "zaqar-delay.conf"
    conf.write_text(f"[notification]\npush_timeout = {push_timeout}\n" if push_timeout else "")
    options = gunicorn_defaults.options(load_settings([str(conf)]))
    assert options["graceful_timeout"] == graceful
