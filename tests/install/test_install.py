"""The package as a user installs it (``tox -e install``): the sdist and the wheel built, the
wheel installed into empty virtualenvs (no test dependency), and the README's quick start and
curl walkthrough run as README.rst writes them, read from it at test time.

Needs nothing of the test suite's conftest files or of the test environment: everything it
checks runs in the virtualenvs it makes. ``tox -e install`` runs it alone, without the conftest
files (``--noconftest``) and without the package installed; the gate's ``py3`` runs it in one
worker (the ``install`` xdist group, so the sdist, the wheel and the core virtualenv are built
once), beside the other tests.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.install, pytest.mark.xdist_group("install")]

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.rst"
PORT = 8888  # the README's
EXTRA_BOUNDARIES = {
    "swift": "zaqar_delay.storage.swift",
    "keystone": "zaqar_delay.keystone",
    "spark": "zaqar_delay.pipeline",
}


# -- README.rst, read as a user reads it --------------------------------------------------------


def section(title: str) -> str:
    """The text of the README section under ``title`` (up to the next section)."""
    lines = README.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == title) + 2
    end = next(
        (
            i - 1
            for i in range(start + 1, len(lines))
            if lines[i] and set(lines[i]) == {"="} and lines[i - 1].strip()
        ),
        len(lines),
    )
    return "\n".join(lines[start:end])


def literal_blocks(text: str) -> list[str]:
    """The literal blocks (after ``::``) of reStructuredText ``text``, dedented."""
    blocks, lines, i = [], text.splitlines(), 0
    while i < len(lines):
        if lines[i].rstrip().endswith("::"):
            i += 1
            block: list[str] = []
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith("    ")):
                block.append(lines[i][4:])
                i += 1
            blocks.append("\n".join(block).strip("\n"))
        else:
            i += 1
    return blocks


def commands(block: str) -> list[str]:
    """The shell commands of a literal block (a line ending in ``\\`` goes on)."""
    found, current = [], ""
    for line in block.splitlines():
        current += line + "\n"
        if not line.rstrip().endswith("\\"):
            if current.strip():
                found.append(current.strip())
            current = ""
    return found


# -- virtualenvs and builds ----------------------------------------------------------------------


def make_venv(path: Path) -> Path:
    """An empty virtualenv (no system site-packages); its bin directory."""
    venv.EnvBuilder(with_pip=True, clear=True).create(path)
    return path / "bin"


def pip_install(bin_dir: Path, *requirements: str) -> None:
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "-q", *requirements],
        check=True,
        timeout=1200,
    )


def run_in(
    bin_dir: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """``args`` run with the virtualenv of ``bin_dir`` first on PATH."""
    base = env if env is not None else dict(os.environ)
    path = f"{bin_dir}{os.pathsep}{base.get('PATH', os.environ['PATH'])}"
    return subprocess.run(
        list(args), env={**base, "PATH": path}, capture_output=True, text=True, timeout=300
    )


@pytest.fixture(scope="session")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sdist and the wheel, built from this tree as a release is."""
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    return out


def wheel_of(dist: Path) -> Path:
    (wheel,) = dist.glob("zaqar_delay-*.whl")
    return wheel


def sdist_of(dist: Path) -> Path:
    (sdist,) = dist.glob("zaqar_delay-*.tar.gz")
    return sdist


@pytest.fixture(scope="session")
def core(dist: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A virtualenv holding the wheel alone (no extra); its bin directory."""
    bin_dir = make_venv(tmp_path_factory.mktemp("core") / "venv")
    pip_install(bin_dir, str(wheel_of(dist)))
    return bin_dir


# -- the sdist -----------------------------------------------------------------------------------


def test_the_sdist_holds_every_file_of_the_wheel_and_the_samples(dist: Path) -> None:
    with zipfile.ZipFile(wheel_of(dist)) as wheel:
        in_wheel = {n for n in wheel.namelist() if n.startswith("zaqar_delay/")}
    with tarfile.open(sdist_of(dist)) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    assert any(n.endswith(".lua") for n in in_wheel) and any("static/" in n for n in in_wheel)
    assert in_wheel <= in_sdist, sorted(in_wheel - in_sdist)
    tracked = subprocess.run(
        ["git", "ls-files", "etc"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    assert tracked and set(tracked) <= in_sdist, sorted(set(tracked) - in_sdist)
    for needed in ("README.rst", "pyproject.toml", "setup.py"):
        assert needed in in_sdist


# -- the README's two commands and walkthrough ---------------------------------------------------


def port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def wait_for_server(deadline_s: float, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        assert process.poll() is None, f"the server exited:\n{log.read_text()[-4000:]}"
        if not port_free(PORT):
            return
        time.sleep(0.5)
    raise AssertionError(f"no server on {PORT}:\n{log.read_text()[-4000:]}")


@pytest.fixture
def home() -> Iterator[Path]:
    """A fresh, empty HOME with a short path: the embedded store's socket lies under the user
    data directory in it, and a socket path holds at most 107 bytes (pytest's temporary
    directories under an xdist worker are longer than the server accepts)."""
    path = Path(tempfile.mkdtemp(prefix="zd-home-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def quick_start(dist: Path, core: Path, tmp_path: Path, home: Path) -> Iterator[None]:
    """The README's quick-start line, as written, in an unpacked sdist with the core
    virtualenv first on PATH and a fresh HOME; stopped (SIGTERM) afterwards."""
    (line,) = [
        c for b in literal_blocks(section("Quick start")) for c in commands(b) if "server" in c
    ]
    with tarfile.open(sdist_of(dist)) as sdist:
        sdist.extractall(tmp_path, filter="data")
    (source,) = tmp_path.glob("zaqar_delay-*")
    assert port_free(PORT), f"port {PORT}, the README's, is taken"
    env = {**os.environ, "HOME": str(home), "PATH": f"{core}{os.pathsep}{os.environ['PATH']}"}
    for name in ("XDG_DATA_HOME", "XDG_CACHE_HOME", "XDG_CONFIG_HOME", "ZAQAR_DELAY_STORAGE_URI"):
        env.pop(name, None)
    log = tmp_path / "server.log"
    with log.open("wb") as out:
        server = subprocess.Popen(
            ["bash", "-c", line], cwd=source, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
    try:
        wait_for_server(600, server, log)
        yield
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    assert port_free(PORT)
    # The data went under the fresh HOME (the user data directory, as the README says).
    assert (home / ".local" / "share" / "zaqar-delay").is_dir(), sorted(home.rglob("*"))


def curl(setup: str, command: str) -> str:
    """A walkthrough command, run by bash after the walkthrough's header definition."""
    done = subprocess.run(
        ["bash", "-c", f"{setup}\n{command}"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (command, done.stderr)
    return done.stdout


def status_of(answer: str) -> int:
    return int(re.match(r"HTTP/1\.1 (\d{3})", answer).group(1))  # type: ignore[union-attr]


def test_the_quick_start_serves_and_the_curl_walkthrough_works_verbatim(quick_start: None) -> None:
    setup, create, post, hidden, claim, delete = literal_blocks(
        section("A delayed message with curl")
    )
    assert "Client-ID" in setup and "X-Project-ID" in setup
    assert status_of(curl(setup, create)) == 201
    posted_at = time.monotonic()
    resources = json.loads(curl(setup, post))["resources"]
    assert len(resources) == 1
    listing, early_claim = commands(hidden)
    assert json.loads(curl(setup, listing))["messages"] == []  # not due: not listed
    assert status_of(curl(setup, early_claim)) == 204  # not due: not claimed
    claimed = json.loads(curl(setup, claim))
    answered_after = time.monotonic() - posted_at
    [message] = claimed["messages"]
    assert message["body"] == {"user": 42, "event": "welcome"}
    # The queue's delay is 10 s: the waiting claim answers once the message is due, not before.
    assert answered_after >= 9.9, answered_after
    href = message["href"]
    assert href.startswith(resources[0]) and "claim_id=" in href
    message_id = href.split("/messages/", 1)[1].split("?", 1)[0]
    claim_id = href.split("claim_id=", 1)[1]
    filled = delete.replace("<claim id>", claim_id).replace("<id>", message_id)
    assert status_of(curl(setup, filled)) == 204


# -- the commands and the extras -----------------------------------------------------------------


def test_the_status_and_pipeline_commands_run_from_the_wheel(core: Path, home: Path) -> None:
    env = {**os.environ, "HOME": str(home)}
    checked = run_in(core, "zaqar-delay-status", "upgrade", "check", env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "Store durability" in checked.stdout
    # It started the embedded store for the check, and stopped it again.
    assert (home / ".local" / "share" / "zaqar-delay").is_dir()
    assert not stores_running_under(home)
    helped = run_in(core, "zaqar-delay-pipeline", "--help")
    assert helped.returncode == 0 and "schedule" in helped.stdout, helped.stderr


def stores_running_under(directory: Path) -> list[int]:
    """Live redis-servers whose socket lies under ``directory`` (their /proc titles)."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if f"unixsocket:{directory}/".encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry))
    return found


MISSING_EXTRA = {
    "swift": "from zaqar_delay.conf import Settings\n"
    "from zaqar_delay.storage.uri import open_driver\n"
    "open_driver('swift://u:k@/p?auth_url=http://127.0.0.1:9/auth/v1.0', Settings())",
    "keystone": "from zaqar_delay.conf import ServerSettings, Settings\n"
    "from zaqar_delay.keystone.auth_token import token_checked\n"
    "token_checked(lambda e, s: [], Settings(server=ServerSettings(auth_strategy='keystone')))",
}


@pytest.mark.parametrize("extra", sorted(MISSING_EXTRA))
def test_without_an_extra_its_feature_says_in_one_line_what_to_install(
    core: Path, extra: str
) -> None:
    failed = run_in(core, "python", "-c", MISSING_EXTRA[extra])
    assert failed.returncode != 0
    last = failed.stderr.strip().splitlines()[-1]
    assert f"pip install 'zaqar-delay[{extra}]'" in last, failed.stderr


def test_without_the_spark_extra_the_pipeline_says_what_to_install(
    core: Path, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    journal.mkdir()
    failed = run_in(
        core, "zaqar-delay-pipeline", "report", "--journal", str(journal), "--out", str(tmp_path)
    )
    assert failed.returncode == 2
    assert "pip install 'zaqar-delay[spark]'" in failed.stderr.strip().splitlines()[-1]


IMPORT_EXTRA = """
import importlib, pkgutil, re, sys
from importlib import metadata

extra, boundary = sys.argv[1], sys.argv[2]
# Every module of the extra's boundary.
package = importlib.import_module(boundary)
for info in pkgutil.walk_packages(package.__path__, boundary + "."):
    importlib.import_module(info.name)
# Every distribution the extra names, as the modules import them (the boundary imports
# them where used, so importing its modules alone would not load them).
tops = metadata.packages_distributions()
for requirement in metadata.requires("zaqar-delay") or []:
    if f'extra == "{extra}"' not in requirement:
        continue
    name = re.split(r"[<>=!~;\\[ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
    modules = [m for m, dists in tops.items() if name in {d.lower() for d in dists}]
    assert modules, f"{name}: no module"
    for module in modules:
        if not module.startswith("_"):
            importlib.import_module(module)
print("imported", boundary)
"""


@pytest.mark.parametrize("extra", sorted(EXTRA_BOUNDARIES))
def test_each_extra_installs_alone_and_serves_its_modules(
    dist: Path, tmp_path: Path, extra: str
) -> None:
    bin_dir = make_venv(tmp_path / "venv")
    pip_install(bin_dir, f"{wheel_of(dist)}[{extra}]")
    script = tmp_path / "import_extra.py"
    script.write_text(IMPORT_EXTRA)
    imported = run_in(bin_dir, "python", str(script), extra, EXTRA_BOUNDARIES[extra])
    assert imported.returncode == 0, imported.stderr
    assert f"imported {EXTRA_BOUNDARIES[extra]}" in imported.stdout


def test_the_walkthrough_commands_are_what_the_test_reads() -> None:
    """A guard on this file's reading of the README: the quick start is the README's two
    commands, and every walkthrough command is a curl to the README's port."""
    quick = [c for b in literal_blocks(section("Quick start")) for c in commands(b)]
    assert quick == ["pip install . && zaqar-delay-server", "pip install tox && tox"]
    blocks = literal_blocks(section("A delayed message with curl"))
    for block in blocks[1:]:
        for command in commands(block):
            assert shlex.split(command, comments=True)[0] == "curl", command
            assert f"127.0.0.1:{PORT}" in command
