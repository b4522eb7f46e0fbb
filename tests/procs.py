"""What /proc says about live processes: the tests that check nothing outlives
its run (a parent, a process group, a flow run) ask it the same questions."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

__all__ = ["alive", "wait_gone", "children", "group_members", "with_environ"]


def _stat(pid_dir: Path) -> list[bytes] | None:
    """The fields after the command name (state, ppid, pgrp, ...); None if the process is gone."""
    try:
        return pid_dir.joinpath("stat").read_bytes().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _live() -> Iterator[tuple[int, list[bytes]]]:
    """(pid, stat fields) of every process that is not a zombie."""
    for pid_dir in Path("/proc").glob("[0-9]*"):
        fields = _stat(pid_dir)
        if fields is not None and fields[0] != b"Z":
            yield int(pid_dir.name), fields


def alive(pid: int) -> bool:
    fields = _stat(Path(f"/proc/{pid}"))
    return fields is not None and fields[0] != b"Z"


def wait_gone(pid: int, timeout_s: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def children(pid: int) -> list[int]:
    return [p for p, fields in _live() if int(fields[1]) == pid]


def group_members(pgid: int) -> list[int]:
    return [p for p, fields in _live() if int(fields[2]) == pgid]


def with_environ(entry: str) -> dict[int, str]:
    """pid -> command line of every live process whose environment holds `entry`
    (e.g. `PREFECT__FLOW_RUN_ID=...`, which a flow run's whole process tree inherits)."""
    needle, found = entry.encode(), {}
    for pid, _ in _live():
        try:
            if needle in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                found[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def host_processes_with(token: str) -> list[int]:
    """Host pids whose command line holds `token` (a sandboxed process that escaped its namespace)."""
    pids = []
    for cmd in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if token.encode() in cmd.read_bytes():
                pids.append(int(cmd.parent.name))
        except OSError:
            continue
    return pids
