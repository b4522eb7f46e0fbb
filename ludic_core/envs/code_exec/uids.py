"""Unprivileged uids for sandboxed runs, never shared with another live process.

When we run as root, each run's candidate and judge get uids of their own, so
RLIMIT_NPROC counts one run's processes only (it is per uid, machine-wide),
and neither can signal or read the other or us. A process reserves a block of
`BLOCK` uids by holding an exclusive lock on the block's file for its whole
life, so two processes on a machine never draw the same uid, whatever their
pids. What a uid could carry from one holder to the next (kernel keyrings)
the seccomp filter denies (`seccomp.py`).
"""

from __future__ import annotations

import fcntl
import os
import random
import tempfile
import threading
from pathlib import Path

__all__ = ["UID_BASE", "BLOCK", "UidBlock", "lock_dir"]

UID_BASE = 1_200_000
BLOCK = 1024
_BLOCKS = 1024


def lock_dir() -> Path:
    """Where the block locks live (root-only, like the uids themselves)."""
    d = Path(tempfile.gettempdir()) / "ludic-sandbox-uids"
    d.mkdir(mode=0o700, exist_ok=True)
    return d


class UidBlock:
    """This process's block of uids, reserved on first use and held until exit."""

    _lock = threading.Lock()
    _held: tuple[int, int] | None = None  # (lock fd, first uid): one block per process, every sandbox draws from it
    _free: list[int] = []
    _owner = 0
    _probes: dict[int, int] = {}

    @classmethod
    def _reserve(cls) -> None:
        order = list(range(_BLOCKS))
        random.Random(os.getpid()).shuffle(order)
        for n in order:
            fd = _lock_block(n)
            if fd is not None:
                first = UID_BASE + n * BLOCK
                cls._held, cls._owner = (fd, first), os.getpid()
                cls._free = list(range(first + BLOCK - 1, first - 1, -1))
                return
        raise OSError(f"all {_BLOCKS} sandbox uid blocks are held by other processes")

    @staticmethod
    def try_hold(n: int) -> bool:
        """Take block `n`'s lock if nobody holds it (for cleaning up after a dead holder)."""
        fd = _lock_block(n)
        if fd is not None:
            UidBlock._probes[n] = fd
        return fd is not None

    @staticmethod
    def let_go(n: int) -> None:
        os.close(UidBlock._probes.pop(n))

    @classmethod
    def acquire(cls, n: int = 1) -> list[int]:
        with cls._lock:
            if cls._held is None or cls._owner != os.getpid():  # a forked child shares its parent's lock
                cls._reserve()
            if len(cls._free) < n:
                raise OSError(f"more than {BLOCK // n} sandbox executions in flight in one process")
            return [cls._free.pop() for _ in range(n)]

    @classmethod
    def release(cls, uids: list[int]) -> None:
        with cls._lock:
            cls._free.extend(uids)


def _lock_block(n: int) -> int | None:
    """An fd holding block `n`'s exclusive lock, or None if another holder has it."""
    fd = os.open(lock_dir() / f"{n}.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        return None
    return fd
