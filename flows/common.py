"""Shared pieces of flow configs and flow plumbing."""

from __future__ import annotations

import re
import shlex
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field, model_validator

from ludic_core.bounds import MAX_PROCESSES, bounded
from ludic_core.frozen import FrozenModel
from ludic_core.lazy import renamed_exports
from ludic_core.stages.spec import NodeSettings

__all__ = ["FlowConfig", "LaunchConfig", "SlotConfig", "MultiNodeLaunchConfig", "SCHEDULE_FOLLOWS_STEPS", "held",
           "require_model_dir", "require_path"]

#: renamed in issue 56: `TrainingConfig` read like `TrainerConfig` (the optimiser's settings)
__getattr__ = renamed_exports(__name__, {"TrainingConfig": "flows.common:MultiNodeLaunchConfig"})

#: a flow's lr schedule spans its run: `trainer.total_steps` is `steps` unless stated (then it must agree)
SCHEDULE_FOLLOWS_STEPS: dict[str, str] = {"trainer.total_steps": "steps"}


class FlowConfig(FrozenModel):
    """Base of every flow config: frozen (no mutation after parsing) and strict
    (`extra="forbid"`: a typo'd field fails at trigger time, naming it).

    `preflight()` checks what validation cannot (paths exist, env names
    resolve): the CLI calls it before Prefect starts, every flow at its start."""

    def preflight(self) -> None:
        """Nothing to check by default."""


class SlotConfig(FlowConfig):
    """A flow that holds an accelerator (a model, a trainer, a server) while it runs."""

    slot: str | None = Field(
        None, description="a Prefect global concurrency limit this run holds from start to end, e.g. `gpu-0` "
                          "(`prefect gcl create gpu-0 --limit 1`): runs naming the same slot wait for each other, "
                          "so they never share its GPU or server ports; None = no slot")


class LaunchConfig(SlotConfig):
    """A flow that trains in checkpointed stages, in-process or under torchrun."""

    launcher: Literal["in_process", "torchrun"] = Field(
        "in_process", description="in_process = one process; torchrun = `nproc` ranks per node (FSDP2)")
    nproc: int = bounded(2, ge=1, le=MAX_PROCESSES, description="ranks per node under torchrun")


class MultiNodeLaunchConfig(LaunchConfig):
    """A `LaunchConfig` that can also train across machines."""

    nodes: NodeSettings = Field(NodeSettings(), description="torchrun across machines (launcher torchrun)")

    @model_validator(mode="after")
    def _nodes_need_torchrun(self) -> MultiNodeLaunchConfig:
        if self.nodes.nnodes > 1 and self.launcher != "torchrun":
            raise ValueError(f"nodes.nnodes={self.nodes.nnodes} needs launcher: torchrun")
        return self


@contextmanager
def held(slot: str | None) -> Iterator[None]:
    """Hold one unit of the global concurrency limit `slot` (None: nothing).
    A slot that does not exist is an error naming it, not a silent pass."""
    if slot is None:
        yield
        return
    from prefect import get_run_logger
    from prefect.concurrency.sync import concurrency

    log = get_run_logger()
    log.info("waiting for slot %r", slot)
    try:
        ctx = concurrency(slot, occupy=1, strict=True)
        ctx.__enter__()
    except Exception as exc:
        raise RuntimeError(f"slot {slot!r}: could not acquire it ({exc}); create it with "
                           f"`prefect gcl create {slot} --limit 1`") from exc
    log.info("holding slot %r", slot)
    try:
        yield
    finally:
        ctx.__exit__(None, None, None)


def require_path(field: str, path: str, what: str = "file or directory", hint: str = "") -> None:
    if not Path(path).exists():
        raise FileNotFoundError(f"{field}: no {what} at {path!r} (relative paths are from {Path.cwd()}){hint}")


def require_model_dir(field: str, path: str) -> None:
    """A Hugging Face model directory: `config.json` at least, or a LoRA adapter
    checkpoint (`adapter_config.json`; loaded merged into its base) (else transformers
    would take the path for a hub repo id and fail far from the cause). A missing
    one says how to make it: a fresh clone has no `runs/`, yet prefect.yaml and
    `ludic run FLOW --example` point at `runs/models/tiny-1m`."""
    require_path(field, path, "model directory", _model_hint(path))
    if (Path(path) / "adapter_config.json").is_file():  # a LoRA checkpoint: loaders merge it into its base
        return
    if not (Path(path) / "config.json").is_file():
        raise FileNotFoundError(f"{field}: {path!r} is not a model directory (no config.json in it)")


def _model_hint(path: str) -> str:
    name, out = Path(path).name, shlex.quote(path)
    if re.fullmatch(r"tiny-\w+", name):  # a preset's name (ludic_core.models.PRESETS; not imported: torch)
        preset = "" if name == "tiny-1m" else f" --preset {name}"
        return f"; build it with `ludic model tiny{preset} --out {out}` (offline, seconds)"
    if re.search(r"checkpoints/step_\d+/model/?$", path):
        return ("; it is a checkpoint a training flow writes (OUT_DIR/checkpoints/step_N/model): run that flow "
                "first, or name a checkpoint that exists")
    return f"; a Hugging Face model directory, or build a tiny one offline: `ludic model tiny --out {out}`"
