"""SFT: chat data -> a checkpoint, in checkpointed stages."""

from __future__ import annotations

from typing import ClassVar, Literal

from prefect import flow
from pydantic import Field

from flows.chains import ChainStage, chain_stage
from flows.common import SCHEDULE_FOLLOWS_STEPS, MultiNodeLaunchConfig, held, require_model_dir, require_path
from flows.loggers import wandb_spec
from flows.staging import run_stages
from ludic_core.bounds import MAX_BATCH, MAX_STEPS, bounded
from ludic_core.config import SFT_TRAINER, SFTConfig, TrainerConfig
from ludic_core.stages.run import DatasetData, StageSpec
from ludic_core.lazy import renamed_exports
from tasks.artifacts import learning_curve_artifact

__all__ = ["SupervisedFinetuneConfig", "sft"]

#: renamed in issue 56: `SFTFlowConfig` read like `SFTConfig` (the sft algorithm's config)
__getattr__ = renamed_exports(__name__, {"SFTFlowConfig": "flows.sft:SupervisedFinetuneConfig"})


class SupervisedFinetuneConfig(MultiNodeLaunchConfig, ChainStage):
    """The `sft` flow's config (the flow; the algorithm it runs is `SFTConfig`, `type: sft`)."""

    follows: ClassVar[dict[str, str]] = SCHEDULE_FOLLOWS_STEPS

    model_path: str = Field(description="initial weights (HF model dir)")
    dataset_path: str = Field(description="a rejection_sampling dataset, any `datasets` directory or a .jsonl file "
                                          "with chat `messages` (loss on assistant turns)")
    use: Literal["auto", "tokens", "messages"] = Field(
        "auto", description="auto = stored token ids when they came from this model's tokenizer, else the messages "
                            "rendered with its chat template")
    out_dir: str = Field("runs/sft", description="checkpoints and metrics")
    steps: int = bounded(400, ge=1, le=MAX_STEPS, description="optimizer steps")
    steps_per_stage: int = bounded(100, ge=1, le=MAX_STEPS, description="each stage ends in a checkpoint")
    batch_size: int = bounded(64, ge=1, le=MAX_BATCH, description="examples per optimizer step")
    trainer: TrainerConfig = Field(
        SFT_TRAINER,
        description="optimisation settings: a partial mapping changes only what it names; total_steps follows steps")
    progress_bar: bool = Field(False, description="console progress bars for the stages")
    wandb_block: str | None = Field(None, description="name of a WandbSettings block: log the stages to wandb")

    def preflight(self) -> None:
        require_model_dir("model_path", self.model_path)
        require_path("dataset_path", self.dataset_path, "dataset",
                     "; the rejection_sampling flow writes one (its out_dir/dataset), or give a .jsonl file")


@flow(name="sft")
def sft(cfg: SupervisedFinetuneConfig) -> str:
    """Returns the final checkpoint's model directory."""
    with held(cfg.slot), chain_stage(cfg, "sft", {"model_path": cfg.model_path, "dataset_path": cfg.dataset_path,
                                                  "out_dir": cfg.out_dir}):
        return _sft(cfg)


def _sft(cfg: SupervisedFinetuneConfig) -> str:
    cfg.preflight()
    spec = StageSpec(model_path=cfg.model_path, checkpoint_dir=f"{cfg.out_dir}/checkpoints",
                     algorithm=SFTConfig(), trainer=cfg.trainer, until_step=cfg.steps,
                     data=DatasetData(path=cfg.dataset_path, batch_size=cfg.batch_size, use=cfg.use),
                     metrics_path=f"{cfg.out_dir}/metrics.jsonl", progress_bar=cfg.progress_bar, title="SFT",
                     nodes=cfg.nodes,
                     wandb=wandb_spec(cfg.wandb_block, run_name=f"sft:{cfg.out_dir}", directory=cfg.out_dir))
    result = run_stages(spec, total_steps=cfg.steps, steps_per_stage=cfg.steps_per_stage,
                        launcher=cfg.launcher, nproc=cfg.nproc, title="SFT")
    learning_curve_artifact("sft-learning-curve", spec.metrics_path, fields=("loss",))
    return result["model_path"]
