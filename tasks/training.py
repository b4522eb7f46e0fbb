"""Training-stage task: K steps ending in a checkpoint, in-process or torchrun.

Retries are safe because a stage resumes from the latest checkpoint: a retry
after a crash (even a SIGKILLed torchrun child) continues the step counter
instead of starting over. A multi-node stage's retry restarts every node.
A corrupt checkpoint is not retried: a stage already falls back past a corrupt
one, so `CheckpointCorrupt` reaching here means none is intact, and a retry
would read the same bytes again (`retry_unless_corrupt`).
"""

from __future__ import annotations

from typing import Any

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE
from prefect.client.schemas.objects import State, TaskRun

from ludic_core.training.checkpoint_integrity import CheckpointCorrupt

from ludic_core.stages.launch import run_torchrun
from ludic_core.stages.run import StageSpec, run_stage
from tasks.nodes import cancel_nodes, start_nodes, wait_nodes
from tasks.retries import retry_unless_stopping


def retry_unless_corrupt(task: Any, task_run: TaskRun, state: State) -> bool:
    """Prefect's retry condition: a crash is worth a retry, a corrupt checkpoint is not (nor
    anything once the process is stopping)."""
    return (retry_unless_stopping(task, task_run, state)
            and not isinstance(state.data, CheckpointCorrupt))  # Failed(data=exc) for a raised exception


@task(name="train-stage", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=2,
      retry_condition_fn=retry_unless_corrupt)
def train_stage(spec: StageSpec, launcher: str = "in_process", nproc: int = 2) -> dict:
    log = get_run_logger()
    if launcher == "torchrun":
        nodes = start_nodes(spec, nproc)
        if nodes:
            log.info("started %d other node(s) for step %d: %s", len(nodes), spec.until_step, nodes)
        try:
            result = run_torchrun(spec, nproc, on_line=log.info)
        except BaseException:
            cancel_nodes(nodes)
            raise
        wait_nodes(nodes, timeout_s=spec.nodes.join_timeout_s)
    elif launcher == "in_process":
        if spec.nodes.nnodes > 1:
            raise ValueError(f"nodes.nnodes={spec.nodes.nnodes} needs launcher 'torchrun'")
        result = run_stage(spec)
    else:
        raise ValueError(f"unknown launcher {launcher!r}; use 'in_process' or 'torchrun'")
    log.info("stage done at step %d (resumed from %s, %d ranks): %s", result["step"], result["resumed_from"],
             result["world_size"], result["checkpoint"])
    return result
