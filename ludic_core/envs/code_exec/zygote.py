"""The fork server inside a warm sandbox (standard library only: it runs under
`python -I -S` in bubblewrap, as the sandbox's root, never in our process).

One JSON request per stdin line: {"program", "stdin", "limits"}. For each it
forks a child that drops to the worker's own unprivileged uid, sets the
rlimits, points fds 0-2 at files only root can open, and executes the program
as `__main__` (as HumanEval's harness does, but in a fresh process). The
server waits up to the wall-clock limit, then kills every process of that uid
(the child and anything it left behind), wipes /tmp, and answers one JSON line.
Startup imports the modules most programs use, so children start warm.
"""

import json
import os
import resource
import select
import shutil
import signal
import sys
import time
import traceback

# warm: a forked child finds these imported (HumanEval prompts import typing, math, ...)
import bisect  # noqa: F401
import collections  # noqa: F401
import functools  # noqa: F401
import hashlib  # noqa: F401
import heapq  # noqa: F401
import itertools  # noqa: F401
import math  # noqa: F401
import re  # noqa: F401
import string  # noqa: F401
import typing  # noqa: F401

IO = "/io"  # tmpfs only root can reach: the child's stdin / stdout / stderr files
TMP = "/tmp"


def _child(program: str, limits: dict, uid: int, fds: tuple[int, int, int]) -> None:
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(3, 65536)  # the server's pipes among them
        os.chdir(TMP)
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        for name, (soft, hard) in limits.items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "HOME": TMP, "TMPDIR": TMP, "LANG": "C.UTF-8"})
        sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", closefd=False)
        sys.argv = ["/sandbox/main.py"]
        code = compile(program, "/sandbox/main.py", "exec")
    except BaseException:  # noqa: BLE001 - a setup failure is the run's failure, never the server's
        traceback.print_exc()
        _flush_exit(1)
    status = 0
    try:
        exec(code, {"__name__": "__main__", "__file__": "/sandbox/main.py", "__builtins__": __builtins__})
    except SystemExit as e:  # as the interpreter treats it
        if e.code is None:
            status = 0
        elif isinstance(e.code, int):
            status = e.code & 0xFF
        else:
            print(e.code, file=sys.stderr)
            status = 1
    except BaseException as e:  # noqa: BLE001 - reported as the interpreter would, from the program's frame on
        traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        status = 1
    _flush_exit(status)


def _flush_exit(status: int) -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status)


def _kill_uid(uid: int) -> None:
    """Every process of `uid`: a helper becomes that uid and signals them all (itself included)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def _wait(pid: int, wall_s: float) -> tuple[int | None, bool]:
    """(wait status, timed out)."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], wall_s)
    finally:
        os.close(fd)
    if not ready:
        return None, True
    return os.waitpid(pid, 0)[1], False


def _tail(path: str, n: int) -> str:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size > n:
            f.seek(size - n)
        return f.read().decode("utf-8", "replace")


def _wipe(path: str) -> None:
    for entry in os.listdir(path):
        p = os.path.join(path, entry)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p, ignore_errors=True)
        else:
            try:
                os.unlink(p)
            except OSError:
                pass


def _run(req: dict, uid: int) -> dict:
    paths = [os.path.join(IO, name) for name in ("stdin", "stdout", "stderr")]
    with open(paths[0], "w") as f:
        f.write(req.get("stdin", ""))
    fds = (os.open(paths[0], os.O_RDONLY), os.open(paths[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
           os.open(paths[2], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        _child(req["program"], req["limits"], uid, fds)
    for fd in fds:
        os.close(fd)
    status, timed_out = _wait(pid, float(req["wall_s"]))
    _kill_uid(uid)  # the child at its deadline, and whatever it started, whenever it ended
    if status is None:
        status = os.waitpid(pid, 0)[1]
    wall = time.monotonic() - start
    keep = int(req.get("output_chars", 8192))
    out = {"timed_out": timed_out, "wall_s": wall, "stdout": _tail(paths[1], keep), "stderr": _tail(paths[2], keep),
           "returncode": -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)}
    _wipe(TMP)
    return out


def main() -> None:
    uid = int(sys.argv[1])
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    os.makedirs(IO, mode=0o700, exist_ok=True)
    replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if line.strip():
            replies.write(json.dumps(_run(json.loads(line), uid)) + "\n")


if __name__ == "__main__":
    main()
