"""Children that end with their parent: real processes, a parent SIGKILLed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procs import alive as _alive, children as _children, wait_gone as _wait_gone

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="parent-death signals are Linux's")


def _parent(child_code: str) -> tuple[subprocess.Popen, int]:
    """A parent process that starts a child as `child_code` says and prints its pid."""
    parent = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys, time\n"
        "from ludic_core.lifetime import with_parent\n"
        f"{child_code}\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    line = parent.stdout.readline()
    assert line, "the parent did not start its child"
    return parent, int(line)


def _kill(parent: subprocess.Popen) -> None:
    parent.kill()
    parent.wait()


def _program(guard: int, name: bytes, timeout_s: float = 10.0) -> int:
    """The pid of the guard's child once it has become `name`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for pid in _children(guard):
            try:
                if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].endswith(name):
                    return pid
            except OSError:
                pass
        time.sleep(0.05)
    raise AssertionError(f"no child of {guard} became {name!r}")


@pytest.mark.parametrize("guarded", [True, False])
def test_with_parent_ends_the_program_when_its_parent_is_sigkilled(guarded):
    cmd = "with_parent(['sleep', '600'])" if guarded else "['sleep', '600']"
    parent, child = _parent(f"child = subprocess.Popen({cmd}, start_new_session=True)")
    program = _program(child, b"sleep") if guarded else child
    try:
        assert _alive(program)
        _kill(parent)
        # the control (no guard) shows the test can fail: the plain child outlives its parent
        assert _wait_gone(program, 10 if guarded else 2) is guarded
        if guarded:
            assert _wait_gone(child, 5)  # and the guard ends with it
    finally:
        for pid in (program, child):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_a_program_started_from_a_short_lived_thread_lives_until_its_parent_dies():
    """The kernel's parent-death signal follows the *thread* that forked: started
    from a timer thread, a bare signal would kill the server when the timer ends."""
    code = ("import threading\n"
            "box = []\n"
            "t = threading.Thread(target=lambda: box.append(subprocess.Popen(with_parent(['sleep', '600']))))\n"
            "t.start(); t.join()\n"
            "child = box[0]")
    parent, guard = _parent(code)
    program = _program(guard, b"sleep")
    try:
        time.sleep(1.0)
        assert _alive(program)  # its starting thread is gone, its parent is not
        _kill(parent)
        assert _wait_gone(program, 10)
    finally:
        for pid in (program, guard):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_the_guard_passes_signals_on_and_ends_as_the_program_did():
    from ludic_core.lifetime import with_parent

    guard = subprocess.Popen(with_parent(["sleep", "600"]))
    program = _program(guard.pid, b"sleep")
    guard.terminate()  # what `Popen.terminate` on a server does: it reaches the program
    assert guard.wait(10) == -signal.SIGTERM
    assert _wait_gone(program, 5)

    guard = subprocess.Popen(with_parent([sys.executable, "-c", "import sys; sys.exit(3)"]))
    assert guard.wait(30) == 3

    guard = subprocess.Popen(with_parent(["sleep", "600"]), stderr=subprocess.PIPE)
    os.kill(_program(guard.pid, b"sleep"), signal.SIGKILL)  # the program killed (the OOM killer, say)
    assert guard.wait(10) == -signal.SIGKILL
    assert b"Traceback" not in guard.stderr.read()

    guard = subprocess.Popen(with_parent(["sleep", "600"]))
    program = _program(guard.pid, b"sleep")
    guard.kill()  # a SIGKILLed guard cannot pass anything on: the program's own signal ends it
    guard.wait()
    assert _wait_gone(program, 5)


def test_without_forwarding_the_guard_leaves_group_signals_to_the_program():
    """vLLM is stopped by process group: the program gets SIGTERM itself, once."""
    from ludic_core.lifetime import with_parent

    trap = ("import signal, sys, time\n"
            "n = []\n"
            "signal.signal(signal.SIGTERM, lambda *a: n.append(1))\n"
            "print('ready', flush=True)\n"
            "time.sleep(1.5)\n"
            "sys.exit(10 + len(n))")
    guard = subprocess.Popen(with_parent([sys.executable, "-c", trap], forward=False), stdout=subprocess.PIPE,
                             text=True, start_new_session=True)
    assert guard.stdout.readline().strip() == "ready"
    os.killpg(guard.pid, signal.SIGTERM)
    assert guard.wait(10) == 11  # one SIGTERM reached the program; the guard waited for it


def test_exit_when_orphaned_ends_a_child_started_from_a_short_lived_thread():
    """The case the kernel's signal gets wrong: the starting thread ends, the parent
    lives on (the child must live), then the parent dies (the child must go)."""
    code = ("import threading\n"
            "box = []\n"
            "t = threading.Thread(target=lambda: box.append(subprocess.Popen([sys.executable, '-c', "
            "'from ludic_core.lifetime import exit_when_orphaned; import time; exit_when_orphaned(0.1); "
            "time.sleep(600)'])))\n"
            "t.start(); t.join()\n"
            "child = box[0]")
    parent, child = _parent(code)
    try:
        time.sleep(1.0)
        assert _alive(child)  # its starting thread is gone, its parent is not
        _kill(parent)
        assert _wait_gone(child, 10)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_die_with_parent_arms_this_process():
    code = ("child = subprocess.Popen([sys.executable, '-c', "
            "'import signal, time; from ludic_core.lifetime import die_with_parent; "
            "assert die_with_parent(signal.SIGKILL); time.sleep(600)'])")
    parent, child = _parent(code)
    try:
        time.sleep(1.0)
        assert _alive(child)
        _kill(parent)
        assert _wait_gone(child, 10)
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.parametrize("reaped", [True, False])
def test_a_reaped_process_ends_when_the_process_that_armed_the_reaper_is_sigkilled(reaped):
    """A process some library started (Prefect's embedded API server): we cannot wrap
    its command, so a reaper in its own session ends it when we die, even when our
    whole process group is SIGKILLed."""
    arm = "from ludic_core.lifetime import reap_when_parent_dies; reap_when_parent_dies(child.pid)" if reaped else ""
    parent, child = _parent(f"child = subprocess.Popen(['sleep', '600'], start_new_session=True)\n{arm}")
    try:
        assert _alive(child)
        time.sleep(0.5)
        assert _alive(child)  # the reaper leaves it alone while the parent lives
        _kill(parent)
        # the control (no reaper) shows the test can fail: the plain child outlives its parent
        assert _wait_gone(child, 10 if reaped else 2) is reaped
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_reaper_ends_with_its_target():
    target = subprocess.Popen(["sleep", "600"])
    from ludic_core.lifetime import reap_when_parent_dies

    reaper = reap_when_parent_dies(target.pid)
    try:
        assert _alive(reaper)
        target.kill()
        target.wait()
        assert _wait_gone(reaper, 5)  # nothing to reap: it does not linger
    finally:
        if _alive(reaper):
            os.kill(reaper, signal.SIGKILL)
