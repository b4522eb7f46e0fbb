"""What a training stage runs: a plain-JSON spec (torch-free).

The same spec runs in-process or is written to a file for
`torchrun ... -m ludic_core.stages.run SPEC.json`, so it holds names and
numbers, never objects: data is a discriminated union on `kind`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field, model_validator

from ludic_core.bounds import MAX_BATCH, MAX_NODES, MAX_SECONDS, MAX_STEPS, bounded
from ludic_core.compose.configs import BRANCH_HELP, AgentConfig, BranchConfig, EnvConfig, SeedSchedule
from ludic_core.config import AlgorithmConfig, LocalInferenceConfig, TrainerConfig, VLLMEndpoint
from ludic_core.frozen import FrozenModel

__all__ = ["DatasetData", "RolloutData", "StreamData", "DataSpec", "WandbSpec", "NodeSettings", "StageSpec"]


class DatasetData(FrozenModel):
    """Fixed SFT data: a rejection-sampling dataset, any `datasets` directory or a
    JSONL file with chat `messages` (loss on assistant turns)."""

    kind: Literal["dataset"] = "dataset"
    path: str = Field(description="dataset directory (save_to_disk) or .jsonl file")
    batch_size: int = bounded(64, ge=1, le=MAX_BATCH, description="examples per optimizer step")
    use: Literal["auto", "tokens", "messages"] = Field(
        "auto", description="auto = the stored token ids when they came from the student's tokenizer, "
                            "else the chat messages rendered with the student's template")


class RolloutData(FrozenModel):
    """Fresh episodes of any env from the current policy, every step."""

    kind: Literal["rollouts"] = "rollouts"
    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    requests_per_step: int = bounded(8, ge=1, le=MAX_BATCH,
                                     description="prompts (env seeds) per step; each is sampled group_size times")
    schedule: SeedSchedule = Field(SeedSchedule(start=1_000), description="the env seeds of consecutive steps")
    branch: BranchConfig | None = Field(None, description=BRANCH_HELP)


class StreamData(FrozenModel):
    """SAW items that actors put on a Redis Stream (pipeline RL): the stage
    trains `items_per_step` of them per step and acknowledges them once the
    checkpoint holding them is committed. The password travels in the
    environment variable `password_env`, never in the spec file."""

    kind: Literal["stream"] = "stream"
    url: str = Field(description="redis://HOST:PORT/DB, rediss:// (TLS) or unix://")
    password_env: str = Field("LUDIC_REDIS_PASSWORD", description="environment variable holding the password")
    key: str = Field("ludic:saw", description="the stream")
    group: str = Field("trainers", description="its consumer group")
    consumer: str = Field("trainer-0", description="this trainer's name in the group")
    items_per_step: int = bounded(64, ge=1, le=MAX_BATCH, description="SAW items per optimizer step")
    timeout_s: float | None = bounded(600.0, gt=0, le=MAX_SECONDS,
                                      description="give up when a batch takes longer (None = wait)")


DataSpec = Annotated[Union[DatasetData, RolloutData, StreamData], Field(discriminator="kind")]


class WandbSpec(FrozenModel):
    """Log a stage to Weights & Biases (rank 0). The key travels in `WANDB_API_KEY`, never in the spec."""

    project: str = "ludic"
    mode: Literal["online", "offline", "disabled"] = "offline"
    run_name: str | None = None
    directory: str | None = Field(None, description="where wandb writes its run (None = wandb's default)")


class NodeSettings(FrozenModel):
    """How a torchrun stage spans machines. Every node runs the same agent command
    (c10d rendezvous), so the spec is identical on all of them; checkpoint_dir and
    model_path must be on storage every node reads and writes (DCP writes shards
    from every rank)."""

    nnodes: int = bounded(1, ge=1, le=MAX_NODES, description="machines in the job (1 = a standalone torchrun)")
    rdzv_endpoint: str | None = Field(
        None, description="HOST:PORT of the rendezvous store, reachable from every node (needed when nnodes > 1); "
                          "the agent on the machine named HOST hosts it")
    rdzv_id: str = Field("ludic", description="job id every node passes; the stage's target step is appended, so a "
                                              "later stage never joins an earlier one's rendezvous")
    join_timeout_s: int = bounded(600, ge=1, le=MAX_SECONDS, description="how long an agent waits for the other nodes")
    node_deployments: list[str] = Field(
        [], description="Prefect deployments (FLOW/DEPLOYMENT of train_node, one per other node, e.g. on a work "
                        "pool per machine) that the flow triggers to start the other nodes' agents; empty = start "
                        "them yourself (`ludic run train_node --config FILE` on each)")

    @model_validator(mode="after")
    def _endpoint_when_multi_node(self) -> NodeSettings:
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError(f"nnodes={self.nnodes} needs rdzv_endpoint (HOST:PORT reachable from every node)")
        if self.rdzv_endpoint is not None:
            host, _, port = self.rdzv_endpoint.rpartition(":")
            if not host or not port.isdigit():
                raise ValueError(f"rdzv_endpoint must be HOST:PORT, got {self.rdzv_endpoint!r}")
        if self.node_deployments and len(self.node_deployments) != self.nnodes - 1:
            raise ValueError(f"node_deployments names {len(self.node_deployments)} deployments; "
                             f"nnodes={self.nnodes} needs one per other node ({self.nnodes - 1})")
        return self


class StageSpec(FrozenModel):
    model_path: str = Field(description="initial weights (HF dir); later stages resume from checkpoints")
    checkpoint_dir: str
    algorithm: AlgorithmConfig
    trainer: TrainerConfig = TrainerConfig()
    data: DataSpec
    until_step: int = bounded(ge=1, le=MAX_STEPS, description="train until the trainer's step counter reaches this")
    metrics_path: str | None = None
    progress_bar: bool = Field(False, description="a console progress bar (rank 0)")
    title: str = Field("train", description="what the progress bar calls this job")
    vllm: VLLMEndpoint | None = Field(None, description="None = in-process LocalChatClient")
    publish_dir: str | None = Field(
        None, description="stream data without vllm: publish each step's weights as a model directory here "
                          "(DirectoryPublisher) for actors in other processes")
    local: LocalInferenceConfig = Field(LocalInferenceConfig(), description="the in-process LocalChatClient")
    wandb: WandbSpec | None = Field(None, description="also log to wandb")
    nodes: NodeSettings = Field(NodeSettings(), description="torchrun across machines (launcher torchrun only)")

    @model_validator(mode="after")
    def _adapters_need_lora(self) -> StageSpec:
        if self.vllm is not None:
            self.vllm.lora.publishes_adapters(self.trainer.lora)  # mode 'adapter' without lora: refused here
        return self
