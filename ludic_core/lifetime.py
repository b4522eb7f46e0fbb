"""Child processes that end with the process that started them.

Why: a flow run that is cancelled (SIGTERM, then SIGKILL after a grace period)
or crashes must not leave a vLLM server, a torchrun agent and its ranks, a
redis-server or actor workers running, holding GPUs and ports. Linux's
parent-death signal (`prctl(PR_SET_PDEATHSIG)`) delivers a signal to a child
when its parent dies, however it dies; it survives `exec`, so a short stub can
arm it and then exec the real program.

The kernel's "parent", though, is the *thread* that forked the child: a
server started from a short-lived thread (a timer, a pool thread) would be
killed when that thread ends. So `with_parent` runs the program under a small
guard process instead: the guard watches its own parent *process* (its ppid
changes only when that process dies) and then signals the program; the guard's
main thread is the program's parent for its whole life, so the program can
safely carry a parent-death signal for the guard itself being SIGKILLed.
A child of ours that may be started from any thread (an actor worker) watches
for its parent itself (`exit_when_orphaned`). A process some library started
for us, whose command we do not control (Prefect's embedded API server), gets a
reaper (`reap_when_parent_dies`).
"""

from __future__ import annotations

import os
import signal
import sys

__all__ = ["die_with_parent", "exit_when_orphaned", "reap_when_parent_dies", "with_parent"]

_PR_SET_PDEATHSIG = 1

# Arms SIGKILL for when its parent (the guard's main thread) dies, then becomes the program.
_ARM = ("import ctypes, os, sys; ctypes.CDLL(None, use_errno=True).prctl(1, 9, 0, 0, 0); "
        "os.getppid() == int(sys.argv[1]) or sys.exit(1); os.execvp(sys.argv[2], sys.argv[2:])")

# The guard: runs the program, passes on the signals it is sent (when `forward`),
# sends `sig` when the process that started it dies (SIGKILL 30 s later if it
# lingers), and ends as the program ended (same exit code or signal).
_GUARD = """\
import os, signal, subprocess, sys, threading, time
sig, forward, arm, cmd = int(sys.argv[1]), sys.argv[2] == "1", sys.argv[3], sys.argv[4:]
parent = os.getppid()
child = subprocess.Popen([sys.executable, "-c", arm, str(os.getpid()), *cmd])

def send(signum, frame=None):
    try:
        child.send_signal(signum)
    except ProcessLookupError:
        pass

for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
    signal.signal(s, send if forward else signal.SIG_IGN)

def watch():
    while child.poll() is None and os.getppid() == parent:
        time.sleep(0.2)
    if child.poll() is None:
        send(sig)
        time.sleep(30)
        send(signal.SIGKILL)

threading.Thread(target=watch, daemon=True).start()
rc = child.wait()
if rc < 0:
    if -rc not in (signal.SIGKILL, signal.SIGSTOP):  # these two have no handler to reset
        signal.signal(-rc, signal.SIG_DFL)
    os.kill(os.getpid(), -rc)
sys.exit(rc)
"""


# The reaper: waits while both its parent and the target live; if the parent dies
# first, signals the target (SIGKILL after `grace` s). It ends when the target does.
_REAPER = """\
import os, signal, sys, time
target, sig, grace = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
parent = os.getppid()

def alive():
    try:
        with open(f"/proc/{target}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False

while alive() and os.getppid() == parent:
    time.sleep(0.2)
if alive():
    os.kill(target, sig)
    deadline = time.monotonic() + grace
    while alive() and time.monotonic() < deadline:
        time.sleep(0.2)
    if alive():
        os.kill(target, signal.SIGKILL)
"""


def reap_when_parent_dies(pid: int, sig: int = signal.SIGTERM, grace_s: float = 10.0) -> int | None:
    """Start a reaper that sends `sig` to `pid` if this process dies before it
    (SIGKILL `grace_s` later if it lingers), and ends when `pid` does. For a
    process started by code we do not control, so `with_parent` cannot wrap
    its command. The reaper sits in its own session: a kill of our process
    group leaves it standing to do its job. Returns its pid (None off Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    import subprocess

    return subprocess.Popen([sys.executable, "-c", _REAPER, str(int(pid)), str(int(sig)), str(grace_s)],
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True).pid


def with_parent(cmd: list[str], sig: int = signal.SIGTERM, *, forward: bool = True) -> list[str]:
    """`cmd`, run under a guard so that it gets `sig` when the process starting
    it dies, whichever thread started it. SIGTERM lets a server shut down
    cleanly (vLLM frees its engine, torchrun stops its ranks, redis-server
    flushes its append-only file). The guard's pid is what Popen returns: it
    passes SIGTERM/SIGINT/SIGHUP on to the program (`forward`; off for programs
    stopped by process group, which get the signal themselves), and a SIGKILLed
    guard takes the program with it (SIGKILL)."""
    if not sys.platform.startswith("linux"):
        return list(cmd)
    return [sys.executable, "-c", _GUARD, str(int(sig)), "1" if forward else "0", _ARM, *cmd]


def die_with_parent(sig: int = signal.SIGKILL) -> bool:
    """Arm the parent-death signal in this process; exit at once if the parent
    is already gone. Returns False where the platform has no such signal."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    parent = os.getppid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):
        return False
    if os.getppid() != parent:  # the parent died before the signal was armed
        os._exit(1)
    return True


def exit_when_orphaned(poll_s: float = 1.0) -> None:
    """A daemon thread that ends this process (SIGKILL) once its parent is gone,
    whichever thread of the parent started it."""
    import threading
    import time

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, name="exit-when-orphaned", daemon=True).start()
