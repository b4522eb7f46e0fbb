"""What running model-written code takes and gives: `Limits` in, `ExecResult` out,
an optional trusted `Judge` beside it, and the `Sandbox` protocol every backend
(`sandbox.py`, `warm.py`) implements. No process is started here.
"""

from __future__ import annotations

import signal
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from ludic_core.frozen import FrozenModel

__all__ = ["Status", "SandboxError", "Limits", "Judge", "ExecResult", "Sandbox"]

Status = Literal["ok", "error", "timeout", "killed"]


class SandboxError(RuntimeError):
    """The sandbox itself could not run (missing binary, no user namespaces): not the program's fault."""


class Limits(FrozenModel):
    """What one execution may use. Exceeding one ends it as a failed attempt."""

    wall_s: float = Field(10.0, gt=0, le=3600, description="wall-clock limit (at most 3600 s); then every process of "
                                                           "the run is killed")
    cpu_s: int = Field(10, ge=1, le=3600, description="RLIMIT_CPU seconds (at most 3600)")
    memory_mb: int = Field(1024, ge=64, le=65536, description="memory of the whole run where a memory cgroup can be "
                                                             "made (as root), else RLIMIT_AS of each process")
    processes: int = Field(32, ge=1, le=4096, description="RLIMIT_NPROC: processes and threads the program may run")
    file_mb: int = Field(16, ge=1, le=4096, description="RLIMIT_FSIZE: the largest file it may write (stdout included)")
    tmp_mb: int = Field(64, ge=1, le=65536, description="size of its private /tmp (bubblewrap)")
    output_chars: int = Field(8192, ge=0, le=1 << 24, description="stdout / stderr kept in the result (their tails)")


@dataclass(frozen=True)
class Judge:
    """Trusted code run beside the candidate: `program` calls `_ludic_candidate`
    (the candidate's `entry_point`, through `crossing.proxy`) and writes its
    verdict to `_ludic_verdict`."""

    program: str
    entry_point: str


@dataclass(frozen=True)
class ExecResult:
    """`ok`: exit status 0; `error`: another exit status; `timeout`: killed at
    the wall-clock limit; `killed`: ended by a signal (CPU or file-size limit,
    out of memory). In a judged run the status is the judge's, `stdout` and
    `stderr` are the candidate's, and `verdict` is what the judge wrote."""

    status: Status
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float
    verdict: str = ""
    judge_stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def reason(self) -> str:
        """One line for a log or an observation."""
        if self.status == "ok":
            return "exit status 0"
        if self.status == "timeout":
            return f"timed out after {self.wall_s:.1f} s"
        if self.status == "killed":
            return f"killed by {_signal_name(-(self.returncode or 0))}"
        tail = self.stderr.strip().splitlines()
        return f"exit status {self.returncode}" + (f": {tail[-1]}" if tail else "")


@runtime_checkable
class Sandbox(Protocol):
    """Runs a Python program under `limits`; `stdin` is its standard input; a
    `judge` turns the run into a test of the program's `judge.entry_point`."""

    name: str

    def run(self, program: str, *, limits: Limits, stdin: str = "", judge: Judge | None = None) -> ExecResult: ...


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"
