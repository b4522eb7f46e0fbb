"""Run a training job as a chain of checkpointed stages, observable and skippable."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from prefect import get_run_logger
from prefect.artifacts import create_progress_artifact, update_progress_artifact

from ludic_core.training.checkpoint import verified_checkpoint
from ludic_core.stages.run import StageSpec
from tasks.training import train_stage

__all__ = ["run_stages"]


def _step_of(path: Path | None) -> int:
    return int(path.name.rsplit("_", 1)[-1]) if path is not None else 0


def run_stages(base: StageSpec, *, total_steps: int, steps_per_stage: int, launcher: str, nproc: int,
               title: str, run_one: Callable[[StageSpec], dict] | None = None) -> dict:
    """Stages of `steps_per_stage` steps up to `total_steps`, each one task run
    ending in a checkpoint. Stages whose checkpoint exists are skipped, so a
    re-run after a crash continues where the last one stopped. `run_one(spec)`
    replaces the plain (retried) `train_stage` call, e.g. to restart an
    inference server between attempts."""
    log = get_run_logger()
    progress = create_progress_artifact(progress=0.0, description=title)
    targets = list(range(steps_per_stage, total_steps, steps_per_stage)) + [total_steps]
    for target in targets:
        done = _step_of(verified_checkpoint(base.checkpoint_dir))
        if done >= target:
            log.info("%s: stage up to step %d already done (checkpoint at %d), skipped", title, target, done)
        else:
            spec = base.model_copy(update={"until_step": target})
            if run_one is not None:
                run_one(spec)
            else:
                train_stage(spec, launcher=launcher, nproc=nproc)
        update_progress_artifact(progress, progress=100.0 * target / total_steps)
    final = verified_checkpoint(base.checkpoint_dir)
    if final is None:
        raise RuntimeError(f"{title}: no checkpoint in {base.checkpoint_dir} after training")
    return {"checkpoint": str(final), "model_path": str(final / "model"), "step": _step_of(final)}
