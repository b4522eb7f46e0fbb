"""Stages: the unit a pipeline runs and retries (resume, train to a step, checkpoint).

A layer of its own, above `training`: a stage wires a spec's data, inference and
weight publishing (compose, queue, publish, rejection) around the Trainer, so the
trainer itself needs none of them. `spec` is plain JSON (torch-free); `run` runs a
stage in-process or as `python -m ludic_core.stages.run SPEC.json`; `launch` runs
it under torchrun. Names resolve lazily (`ludic_core.lazy`): importing this package
loads no torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludic_core.stages.launch import run_torchrun, torchrun_command
    from ludic_core.stages.run import run_stage
    from ludic_core.stages.spec import (
        DatasetData,
        DataSpec,
        NodeSettings,
        RolloutData,
        StageSpec,
        StreamData,
        WandbSpec,
    )

__all__ = [
    "StageSpec",
    "DatasetData",
    "RolloutData",
    "StreamData",
    "DataSpec",
    "WandbSpec",
    "NodeSettings",
    "run_stage",
    "run_torchrun",
    "torchrun_command",
]

_SOURCE = {
    "StageSpec": "spec",
    "DatasetData": "spec",
    "RolloutData": "spec",
    "StreamData": "spec",
    "DataSpec": "spec",
    "WandbSpec": "spec",
    "NodeSettings": "spec",
    "run_stage": "run",
    "run_torchrun": "launch",
    "torchrun_command": "launch",
}

__getattr__, __dir__ = lazy_exports(__name__, _SOURCE)
