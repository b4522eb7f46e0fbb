"""`make test`'s preflight (tests/preflight.py) on a machine without the suite's system tools:
a PATH that holds nothing but python3 (and fake tools where a test says so). One message
names each missing tool and the one command that installs them all; make stops before
pytest; as root with apt-get the packages are installed instead (apt-get faked here)."""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests import preflight

ROOT = Path(__file__).resolve().parents[1]

LIGHT = ("bwrap", "redis-server", "pgrep")


@pytest.fixture
def bare_path(tmp_path, monkeypatch):
    """A PATH with python3 only; PostgreSQL's own bin directories are looked for in an empty place."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    monkeypatch.setattr(preflight, "TOOLS", tuple(
        dataclasses.replace(t, dirs=str(tmp_path / "no-postgresql" / "*")) if t.dirs else t for t in preflight.TOOLS))
    return bin_dir


def _fake_tools(bin_dir: Path, *names: str) -> None:
    for name in names:
        (bin_dir / name).write_text("#!/bin/sh\nexit 0\n")
        (bin_dir / name).chmod(0o755)


def _never_run(*args, **kwargs):
    raise AssertionError(f"nothing may be run: {args}")


class Log:
    def __init__(self):
        self.out, self.err = [], []

    def __call__(self, *args, file=None, flush=False):
        (self.err if file is sys.stderr else self.out).append(" ".join(map(str, args)))


def test_missing_tools_are_named_once_with_one_install_command_and_nothing_installed(bare_path):
    log = Log()
    rc = preflight.main([], environ={"PATH": str(bare_path)}, euid=1000, run=_never_run, log=log)
    assert rc == 1 and log.out == [] and len(log.err) == 1
    (msg,) = log.err
    assert "\n  bwrap (bubblewrap): " in msg and "\n  redis-server (redis-server): " in msg
    assert "\n  pgrep (procps): " in msg
    assert "\n  sudo apt-get install -y bubblewrap redis-server procps\n" in msg
    assert msg.count("apt-get install") == 1 and "not root" in msg and "before pytest" in msg
    assert "chromium" not in msg  # `make test` does not need the heavy tests' tools


def test_heavy_names_the_browser_and_postgresql_too_each_package_once(bare_path):
    log = Log()
    rc = preflight.main(["--heavy"], environ={"PATH": str(bare_path)}, euid=1000, run=_never_run, log=log)
    (msg,) = log.err
    assert rc == 1
    assert "\n  chromium (chromium): " in msg and "\n  chromedriver (chromium-driver): " in msg
    assert "\n  initdb, pg_ctl, createdb, psql (postgresql): " in msg  # not root: no postgres user needed
    assert ("sudo apt-get install -y bubblewrap redis-server procps chromium chromium-driver postgresql\n"
            in msg)


def test_present_tools_pass_silently(bare_path):
    _fake_tools(bare_path, *LIGHT)
    log = Log()
    assert preflight.main([], environ={"PATH": str(bare_path)}, euid=1000, run=_never_run, log=log) == 0
    assert log.out == log.err == []


def test_a_forbidden_install_as_root_only_names_the_command(bare_path):
    _fake_tools(bare_path, "apt-get", "apt-cache")
    log = Log()
    env = {"PATH": str(bare_path), "LUDIC_PREFLIGHT_INSTALL": "0"}
    assert preflight.main([], environ=env, euid=0, run=_never_run, log=log) == 1
    (msg,) = log.err
    assert "\n  apt-get install -y bubblewrap redis-server procps\n" in msg  # root: no sudo
    assert "LUDIC_PREFLIGHT_INSTALL=0" in msg


@pytest.mark.parametrize("lists_know_them", [True, False])
def test_root_with_apt_get_installs_updating_only_when_the_lists_lack_a_package(bare_path, lists_know_them):
    _fake_tools(bare_path, "apt-get", "apt-cache")
    calls = []

    def run(cmd, **kwargs):
        calls.append([Path(cmd[0]).name, *cmd[1:]])
        if cmd[1] == "policy":
            known = cmd[2:] if lists_know_them else cmd[2:-1]
            out = "".join(f"{p}:\n  Installed: (none)\n  Candidate: 1.0\n" for p in known)
            return subprocess.CompletedProcess(cmd, 0, out, "")
        if cmd[1] == "install":
            assert kwargs["env"]["DEBIAN_FRONTEND"] == "noninteractive"
            _fake_tools(bare_path, *LIGHT)
        return subprocess.CompletedProcess(cmd, 0, "", "")

    log = Log()
    assert preflight.main([], environ={"PATH": str(bare_path)}, euid=0, run=run, log=log) == 0
    install = ["apt-get", "install", "-y", "-qq", "bubblewrap", "redis-server", "procps"]
    update = [["apt-get", "update", "-qq"]] * (not lists_know_them)
    assert calls == [["apt-cache", "policy", "bubblewrap", "redis-server", "procps"], *update, install]
    assert log.err == [] and log.out[0].startswith("preflight: installing bubblewrap redis-server procps")
    assert log.out[-1].startswith("preflight: installed bubblewrap redis-server procps in")


def test_a_failed_install_stops_with_the_message(bare_path):
    _fake_tools(bare_path, "apt-get", "apt-cache")

    def run(cmd, **kwargs):
        if cmd[1] == "policy":
            return subprocess.CompletedProcess(cmd, 0, "", "")  # the lists know nothing: update first
        return subprocess.CompletedProcess(cmd, 100 if cmd[1] == "install" else 0, "", "E: no such package")

    log = Log()
    assert preflight.main([], environ={"PATH": str(bare_path)}, euid=0, run=run, log=log) == 1
    assert "E: no such package" in log.out[-1]
    (msg,) = log.err
    assert "apt-get install failed" in msg and "\n  apt-get install -y bubblewrap redis-server procps\n" in msg


@pytest.mark.parametrize("target", ["test", "test-heavy"])
def test_make_stops_before_pytest_and_starts_it_once_the_tools_are_there(bare_path, tmp_path, target):
    """The real Makefile, with a fake .venv whose python records how it was called: without the
    tools make fails with the one message and the fake pytest never runs; with them it runs the
    same pytest invocation as before."""
    venv, vllm_venv, marker = tmp_path / "venv", tmp_path / "venv-vllm", tmp_path / "pytest-started"
    (venv / "bin").mkdir(parents=True)
    vllm_venv.mkdir()
    (venv / "bin" / "python").write_text(f'#!/bin/sh\necho "$@" >> {marker}\n')
    (venv / "bin" / "python").chmod(0o755)
    fresh = max(time.time(), *((ROOT / p).stat().st_mtime for p in
                               ("pyproject.toml", "ludic_core/vllm/setup.py"))) + 1
    for stamp in (venv / ".ludic-installed", vllm_venv / ".ludic-vllm.json"):
        stamp.touch()
        os.utime(stamp, (fresh, fresh))  # installed: make goes straight to the preflight and pytest
    cmd = [shutil.which("make"), "-C", str(ROOT), target, f"VENV={venv}", f"VLLM_VENV={vllm_venv}"]
    env = {"PATH": str(bare_path), "LUDIC_PREFLIGHT_INSTALL": "0"}

    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode != 0 and not marker.exists(), res.stdout + res.stderr
    assert res.stderr.count("preflight: ") == 1 and res.stderr.count("apt-get install -y") == 1, res.stderr
    assert all(f"\n  {name} (" in res.stderr for name in LIGHT), res.stderr
    assert ("chromedriver" in res.stderr) == (target == "test-heavy")

    _fake_tools(bare_path, *LIGHT, "chromium", "chromedriver", "initdb", "pg_ctl", "createdb", "psql")
    if target == "test-heavy" and not preflight.TOOLS[-1].found("", os.geteuid()):
        return  # root without the postgres user: no fake stands in for it
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    tail = "-m heavy --durations=10" if target == "test-heavy" else "--durations=15"
    assert marker.read_text() == f"-m pytest -n 2 --dist loadgroup --no-loadscope-reorder {tail}\n"
