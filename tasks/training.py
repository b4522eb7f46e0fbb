"""Training-stage task: K steps ending in a checkpoint, in-process or torchrun.

Retries are safe because a stage resumes from the latest checkpoint: a retry
after a crash (even a SIGKILLed torchrun child) continues the step counter
instead of starting over.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ludic_core.training.stage import StageSpec, run_stage


def _torchrun(spec: StageSpec, nproc: int) -> dict:
    """Run the stage under torchrun; stream each child line into the Prefect log."""
    log = get_run_logger()
    with tempfile.TemporaryDirectory(prefix="ludic-stage-") as tmp:
        spec_path, result_path = Path(tmp) / "spec.json", Path(tmp) / "result.json"
        spec_path.write_text(spec.model_dump_json())
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={nproc}",
               "-m", "ludic_core.training.stage", str(spec_path), str(result_path)]
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
        log.info("launching: %s", " ".join(cmd))
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        assert proc.stdout is not None
        for line in proc.stdout:
            log.info("[torchrun] %s", line.rstrip())
        if proc.wait() != 0:
            raise RuntimeError(f"torchrun stage exited with code {proc.returncode}; a retry resumes "
                               f"from the latest checkpoint in {spec.checkpoint_dir}")
        return json.loads(result_path.read_text())


@task(name="train-stage", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2)
def train_stage(spec: StageSpec, launcher: str = "in_process", nproc: int = 2) -> dict:
    if launcher == "torchrun":
        result = _torchrun(spec, nproc)
    elif launcher == "in_process":
        result = run_stage(spec)
    else:
        raise ValueError(f"unknown launcher {launcher!r}; use 'in_process' or 'torchrun'")
    get_run_logger().info("stage done at step %d (resumed from %s): %s", result["step"],
                          result["resumed_from"], result["checkpoint"])
    return result
