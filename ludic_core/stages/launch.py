"""Run a training stage under torchrun, as a child process.

The spec travels as a JSON file (no objects cross the process boundary) and
every line the ranks print is handed to `on_line`, so an orchestrator (a
Prefect task) can show it live; a non-zero exit is an error that says a retry
resumes from the latest checkpoint, except when a rank reported a corrupt
checkpoint (`CORRUPT_MARKER`): that is `CheckpointCorrupt`, which a
retry would only repeat.

A stage whose spec spans several machines (`spec.nodes`) runs the same command
on every node: c10d rendezvous at `rdzv_endpoint` assigns the ranks, and each
node's local rank 0 writes that node's copy of the result.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

from ludic_core.lifetime import with_parent
from ludic_core.training.checkpoint_integrity import CORRUPT_MARKER, CheckpointCorrupt
from ludic_core.stages.spec import StageSpec

__all__ = ["corrupt_reports", "run_torchrun", "torchrun_command"]


def torchrun_command(spec: StageSpec, nproc: int, spec_path: str, result_path: str) -> list[str]:
    """The agent's command line: standalone on one node, c10d rendezvous across several."""
    if nproc < 1:
        raise ValueError(f"nproc must be >= 1, got {nproc}")
    nodes = spec.nodes
    if nodes.nnodes == 1:
        placement = ["--standalone"]
    else:
        placement = [f"--nnodes={nodes.nnodes}", "--rdzv-backend=c10d", f"--rdzv-endpoint={nodes.rdzv_endpoint}",
                     f"--rdzv-id={nodes.rdzv_id}-{spec.until_step}", f"--rdzv-conf=join_timeout={nodes.join_timeout_s}",
                     "--max-restarts=0"]
    return [sys.executable, "-m", "torch.distributed.run", *placement, f"--nproc-per-node={nproc}",
            "-m", "ludic_core.stages.run", spec_path, result_path]


def run_torchrun(spec: StageSpec, nproc: int, on_line: Callable[[str], Any] = print) -> dict[str, Any]:
    """Run this node's torchrun agent for `spec` (`nproc` ranks here); returns the stage's result."""
    with tempfile.TemporaryDirectory(prefix="ludic-stage-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(spec.model_dump_json())
        cmd = torchrun_command(spec, nproc, str(spec_path), str(result_path))
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        on_line("launching: " + " ".join(cmd))
        # The agent gets SIGTERM (and stops its ranks) if this process dies; if this
        # call is interrupted (a cancelled run's exception), it is stopped here.
        proc = subprocess.Popen(with_parent(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env=env)
        assert proc.stdout is not None
        corrupt: list[str] = []
        try:
            for line in proc.stdout:
                corrupt += corrupt_reports(line)
                on_line("[torchrun] " + line.rstrip())
        except BaseException:
            _stop(proc)
            raise
        if proc.wait() != 0 and corrupt:
            raise CheckpointCorrupt(corrupt[0])  # the same bytes fail a retry the same way
        if proc.returncode != 0:
            raise RuntimeError(f"torchrun stage exited with code {proc.returncode}; a retry resumes "
                               f"from the latest checkpoint in {spec.checkpoint_dir}")
        return json.loads(result_path.read_text())


def corrupt_reports(line: str) -> list[str]:
    """The `CheckpointCorrupt` message a rank printed on `line` (`CORRUPT_MARKER`), if any."""
    _, marker, rest = line.partition(CORRUPT_MARKER)
    if not marker:
        return []
    try:
        message = json.loads(rest)
    except json.JSONDecodeError:
        return [rest.strip()]
    return [message] if isinstance(message, str) else [rest.strip()]


def _stop(proc: subprocess.Popen, grace_s: float = 30.0) -> None:
    """SIGTERM the agent (it stops its ranks) and wait; SIGKILL after `grace_s`."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
