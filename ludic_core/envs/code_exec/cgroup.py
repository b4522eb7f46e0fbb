"""Memory cgroups for sandboxed runs, where the machine lets us make them.

RLIMIT_AS binds one process: a candidate that forks N children may use N
times `memory_mb`. A cgroup's memory limit binds the whole run. The host makes
one directory per uid (`<root>/ludic-sandbox/<uid>`), binds it into the
sandbox, and the run's leader limits it to the run's `memory_mb` and joins it
(`jail.py`). cgroup v2 is used where its memory controller is enabled, else a
v1 memory hierarchy; where neither is writable (not root, a read-only
/sys/fs/cgroup) there is none, and the limit is per process (say so: the
whole run may then use `memory_mb` x `processes`).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

from ludic_core.envs.code_exec.uids import BLOCK, UID_BASE, UidBlock

__all__ = ["memory_root", "run_cgroup", "remove"]

_ROOTS = (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup/memory"))


@functools.lru_cache(maxsize=1)
def memory_root() -> Path | None:
    """A writable directory under which memory-limited cgroups can be made, or None."""
    if os.geteuid() != 0:
        return None
    for root in _ROOTS:
        v2 = (root / "cgroup.controllers").exists()
        try:
            if v2 and "memory" not in (root / "cgroup.controllers").read_text().split():
                continue
            if not v2 and not (root / "memory.limit_in_bytes").exists():
                continue
            base = root / "ludic-sandbox"
            base.mkdir(exist_ok=True)
            if v2 and "memory" not in (base / "cgroup.subtree_control").read_text().split():
                (base / "cgroup.subtree_control").write_text("+memory")
            return base
        except OSError:
            continue
    return None


def run_cgroup(uid: int) -> Path | None:
    """The cgroup for runs under `uid` (made if missing), or None where there is no memory cgroup."""
    base = memory_root()
    if base is None:
        return None
    _sweep(base)
    path = base / str(uid)
    try:
        path.mkdir(exist_ok=True)
    except OSError:
        return None
    return path


_swept: set[int] = set()


def _sweep(base: Path) -> None:
    """Once per process: remove the cgroups of uid blocks nobody holds (their
    holder died without cleaning up; a held block's lock cannot be taken)."""
    if os.getpid() in _swept:
        return
    _swept.add(os.getpid())
    blocks: dict[int, list[Path]] = {}
    for d in base.iterdir():
        if d.name.isdigit() and int(d.name) >= UID_BASE:
            blocks.setdefault((int(d.name) - UID_BASE) // BLOCK, []).append(d)
    for n, dirs in blocks.items():
        if UidBlock.try_hold(n):
            for d in dirs:
                remove(d)
            UidBlock.let_go(n)


def remove(path: Path | None) -> None:
    """Remove an (empty) run cgroup; a cgroup still in use stays, and is reused by the uid's next holder."""
    if path is not None:
        try:
            path.rmdir()
        except OSError:
            pass
