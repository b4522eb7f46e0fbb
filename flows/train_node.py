"""One other machine of a multi-node torchrun stage.

Deploy it once per machine (on that machine's work pool) and name the
deployments in a training flow's `nodes.node_deployments`: the head's stage
triggers them with its spec, so every node runs the same agent command.
"""

from __future__ import annotations

from prefect import flow, get_run_logger
from pydantic import Field

from flows.common import FlowConfig
from ludic_core.bounds import MAX_PROCESSES, bounded
from ludic_core.stages.launch import run_torchrun
from ludic_core.stages.spec import StageSpec


class TrainNodeConfig(FlowConfig):
    spec: StageSpec = Field(description="the head's stage spec (its `nodes` says where to meet)")
    nproc: int = bounded(2, ge=1, le=MAX_PROCESSES, description="ranks on this machine")


@flow(name="train_node")
def train_node(cfg: TrainNodeConfig) -> dict:
    """This machine's torchrun agent for one stage; returns its copy of the result."""
    log = get_run_logger()
    if cfg.spec.nodes.nnodes < 2:
        raise ValueError("train_node joins a multi-node stage: spec.nodes.nnodes must be >= 2")
    return run_torchrun(cfg.spec, cfg.nproc, on_line=log.info)
