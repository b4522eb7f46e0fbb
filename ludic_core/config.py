"""Torch-free configs: training, inference and, re-exported, the algorithms'.

Configs load anywhere (a Prefect UI form, a YAML file, a test) without
importing torch. Each algorithm's config lives with its build in its own module
of `ludic_core.algorithms`, which assembles `AlgorithmConfig` (a discriminated
union on `type`) from them; they are re-exported here. Frozen and
`extra="forbid"`, so a typo fails naming the field instead of being silently
ignored.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Literal

from pydantic import Field, model_validator

from ludic_core.algorithms import (AlgorithmConfig, CISPOConfig, CustomConfig, DynamicSampling, GRPOConfig,
                                   GSPOConfig, ReinforceBaselineConfig, ReinforceConfig, RolloutReuse, ScaleRLConfig,
                                   SFTConfig)
from ludic_core.bounds import (MAX_ATTEMPTS, MAX_BUCKET_MB, MAX_CHECKPOINTS, MAX_CONCURRENCY, MAX_LORA_RANK,
                               MAX_SEED, MAX_SEQ_LEN, MAX_STEPS, MAX_TOKEN_BUDGET, bounded)
from ludic_core.frozen import FrozenModel
from ludic_core.specs import DEVICE_DOC, DEVICE_PATTERN, DType
from ludic_core.vllm.server import VLLMServerConfig

__all__ = [
    "ReinforceConfig",
    "ReinforceBaselineConfig",
    "GRPOConfig",
    "GSPOConfig",
    "CISPOConfig",
    "SFTConfig",
    "ScaleRLConfig",
    "CustomConfig",
    "DynamicSampling",
    "RolloutReuse",
    "AlgorithmConfig",
    "group_size_of",
    "check_max_lag",
    "reuse_of",
    "LoRAConfig",
    "TrainerConfig",
    "LocalInferenceConfig",
    "PIPELINE_TRAINER",
    "RL_TRAINER",
    "SFT_TRAINER",
    "AdapterPublishing",
    "WeightPush",
    "VLLMServing",
    "VLLMEndpoint",
    "VLLMConfig",
]

Beta = Annotated[float, Field(ge=0.0, lt=1.0)]


def reuse_of(algorithm: AlgorithmConfig) -> RolloutReuse:
    """An algorithm config's rollout reuse; 1 x 1 for those without it."""
    return algorithm.rollout_reuse()


def check_max_lag(reuse: RolloutReuse, max_lag: int | None) -> None:
    """Refuse a `trainer.max_lag` that reuse breaks by itself: a batch's last update trains
    `reuse.updates - 1` versions past the policy that sampled it (one version per optimiser
    update). Items k batches behind are k x `reuse.updates` versions old, which is what pipeline
    RL's queue needs room for."""
    if max_lag is not None and max_lag < reuse.updates - 1:
        raise ValueError(f"trainer.max_lag={max_lag} counts policy versions (one per optimiser update), and reuse "
                         f"makes {reuse.updates} from each batch (mini-batches x epochs): its last update trains "
                         f"{reuse.updates - 1} versions past the policy that sampled it; set max_lag >= "
                         f"{reuse.updates - 1} (>= {reuse.updates} keeps items one batch behind, as pipeline RL needs)")


def group_size_of(algorithm: AlgorithmConfig) -> int:
    """Samples per prompt: the algorithm's `group_size` (stated once, there), 1 without groups."""
    return algorithm.samples_per_prompt()


class LoRAConfig(FrozenModel):
    r: int = bounded(8, ge=1, le=MAX_LORA_RANK, description="adapter rank")
    alpha: int = Field(16, ge=1)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj")


class TrainerConfig(FrozenModel):
    """Optimisation settings. Each field is one decision; defaults suit tiny models."""

    lr: float = Field(1e-3, gt=0.0)
    weight_decay: float = Field(0.0, ge=0.0)
    betas: tuple[Beta, Beta] = Field((0.9, 0.95), description="Adam's moment decay rates, each in [0, 1)")
    warmup_steps: int = bounded(0, ge=0, le=MAX_STEPS)
    schedule: Literal["constant", "linear", "cosine"] = "constant"
    total_steps: int | None = bounded(None, ge=1, le=MAX_STEPS, description="needed by linear/cosine decay")
    max_grad_norm: float | None = Field(1.0, gt=0.0, description="None disables clipping")
    micro_token_budget: int = bounded(8192, ge=1, le=MAX_TOKEN_BUDGET, description="padded tokens per micro-batch")
    max_seq_len: int = bounded(1024, ge=2, le=MAX_SEQ_LEN, description="tokens of one item (prompt and completion)")
    overlong: Literal["error", "drop"] = Field("error", description="items longer than max_seq_len")
    skip_inert: bool = Field(
        True, description="give items of weight 0 no forward or backward pass when the loss declares them inert "
        "(clipped surrogate, REINFORCE, GSPO, CISPO; not with a KL or entropy term): the same gradient, less compute")
    packing: bool = Field(
        False, description="lay items end to end in each micro-batch's rows (no padding between them) where that "
        "computes fewer positions; checked once against padded rows. Off by default: on the CPU (sdpa, dense "
        "document masks) it measured 1.10-1.25x slower (docs/results.md); meant for GPU attention kernels")
    share_prompts: bool = Field(
        True, description="rows of a micro-batch that open with the same prompt (a GRPO group's completions) run "
        "it once, as a KV cache their completions attend to: the same gradient, less compute; checked once against "
        "unshared rows. One process only (off under torchrun, with compile or with grad_checkpointing)")
    grad_checkpointing: bool = False
    compile: bool = Field(
        False, description="torch.compile each decoder layer (dynamic shapes; one process only): fused norms, "
        "rotary and activations. On an H200 at the 0.5B shape 1.47x the step's tokens/s (34% MFU) after ~30 s of "
        "compiling once; little on the CPU")
    device: str = Field("auto", pattern=DEVICE_PATTERN, description=DEVICE_DOC + "; torchrun ranks use their local GPU")
    dtype: Literal["auto", "float32", "bfloat16"] = Field(
        "auto", description="compute precision: float32, or bfloat16 autocast over fp32 master weights; "
                            "auto = bfloat16 on a GPU, float32 on the CPU")
    logprob_chunk_tokens: int = bounded(
        4096, ge=1, le=MAX_TOKEN_BUDGET,
        description="positions per chunk when scoring tokens (bounds the fp32 [tokens, vocab] buffer)")
    lora: LoRAConfig | None = None
    max_lag: int | None = bounded(
        None, ge=0, le=MAX_STEPS,
        description="drop items generated more than this many policy versions behind the trainer (None = keep "
                    "all); a stream's are dropped as they are read, and counted in the queue")
    sync_every_steps: int = bounded(1, ge=1, le=MAX_STEPS, description="publish weights every N steps")
    checkpoint_every: int | None = bounded(None, ge=1, le=MAX_STEPS, description="steps between checkpoints")
    keep_last: int = bounded(3, ge=1, le=MAX_CHECKPOINTS, description="checkpoints kept on disk")
    seed: int = bounded(0, ge=0, le=MAX_SEED, description="torch seed")

    @model_validator(mode="after")
    def _decay_needs_total(self) -> TrainerConfig:
        if self.schedule != "constant" and self.total_steps is None:
            raise ValueError(f"schedule={self.schedule!r} needs total_steps")
        return self


#: What the pipelines train with, stated once: the RL flows (`rl_train`, `pipeline_rl`,
#: `pipeline_trainer`), the demo's RL stage and the benchmarks start here. Sized for the
#: tiny CPU models of the demo (items of up to 512 tokens); a flow's `trainer: {...}`
#: changes only the fields it names.
RL_TRAINER = TrainerConfig(lr=1e-4, micro_token_budget=16_384, max_seq_len=512)
#: Pipeline RL (`pipeline_rl`, `pipeline_trainer`): actors run ahead of the trainer, so items
#: more than one policy version behind it are dropped.
PIPELINE_TRAINER = RL_TRAINER.model_copy(update={"max_lag": 1})
#: SFT (`sft`, the demo's SFT stage): a higher peak lr, 10 warm-up steps, cosine decay over
#: the run (`total_steps` follows the flow's `steps`; 400 is `sft`'s default).
SFT_TRAINER = RL_TRAINER.model_copy(update={"lr": 2e-3, "warmup_steps": 10, "schedule": "cosine",
                                            "total_steps": 400})


class LocalInferenceConfig(FrozenModel):
    """The in-process inference engine (`LocalChatClient`): where it decodes."""

    device: str = Field("auto", pattern=DEVICE_PATTERN, description=DEVICE_DOC)
    dtype: DType = Field("auto", description="weights' dtype: auto = bfloat16 on a GPU, float32 on the CPU")
    max_batch_size: int | None = bounded(
        None, ge=1, le=MAX_CONCURRENCY,
        description="requests decoded together in one batch; default 256 on a GPU, 64 on the CPU")
    compile: bool | Literal["auto"] = Field(
        "auto", description="compile the decode step: auto = on a GPU only (CUDA graphs); true on the CPU too, "
                            "which pays on long runs (a one-off compile per batch shape; see docs/results.md)")


class AdapterPublishing(FrozenModel):
    """How a LoRA run publishes into a vLLM server: its adapter alone (megabytes,
    loaded by name over the unchanged base) or merged full weights (the whole model)."""

    mode: Literal["auto", "adapter", "merged"] = Field(
        "auto", description="auto: a LoRA run publishes its adapter, a full fine-tune its weights; adapter: "
                            "the same, but a full fine-tune is refused; merged: full weights with the adapter "
                            "merged in (a server without LoRA serving)")
    adapter_dir: str | None = Field(
        None, description="where published adapters are written for the server to read (storage the server "
                          "shares when it runs elsewhere); None = `adapters/` beside the run's checkpoint directory")
    keep_last: int = bounded(2, ge=1, le=MAX_CHECKPOINTS,
                             description="adapters kept loaded; older ones are unloaded and their files deleted")

    def publishes_adapters(self, lora: LoRAConfig | None) -> bool:
        """Whether a run with this `lora` (None = full fine-tune) publishes adapters."""
        if self.mode == "adapter" and lora is None:
            raise ValueError("lora.mode 'adapter' publishes LoRA adapters, but the trainer has no lora config "
                             "(a full fine-tune): use mode 'auto' or 'merged'")
        return lora is not None and self.mode != "merged"

    def directory(self, checkpoint_dir: str) -> str:
        """`adapter_dir`, else `adapters/` beside `checkpoint_dir` (inside the run's directory)."""
        return self.adapter_dir or str(PurePath(checkpoint_dir).parent / "adapters")


class WeightPush(FrozenModel):
    """How a run's weights go into a vLLM server: in buckets of `bucket_mb`, or (a LoRA
    run) as its adapter. One of the parts of `VLLMConfig`; an endpoint carries it to the stages."""

    bucket_mb: int = bounded(64, ge=1, le=MAX_BUCKET_MB, description="weight-push bucket size")
    lora: AdapterPublishing = Field(
        AdapterPublishing(), description="how a LoRA run publishes: its adapter (default; a server the flow "
                                         "starts then serves LoRA at the run's rank) or merged full weights")


class VLLMServing(FrozenModel):
    """Which vLLM server: a running one, named by an `InferenceEndpoint` block, or one the
    flow starts for the run from `server` (and stops at its end). One of the parts of
    `VLLMConfig`; a vLLM-served policy (`flows.policies.VLLMPolicy`) is this and a model."""

    endpoint_block: str | None = Field(
        None, description="name of an InferenceEndpoint block (kind vllm) of a running server; "
                          "None = the flow starts a server for this run")
    server: VLLMServerConfig = Field(VLLMServerConfig(), description="how the flow starts its server "
                                                                     "(no endpoint_block)")


class VLLMEndpoint(WeightPush):
    """Roll out through a running vLLM server and publish weights into it: where the
    server is (resolved by a flow from its `VLLMConfig`) and how weights go in.

    The API key is read from the environment variable `api_key_env`, so it is
    never written into a spec file (torchrun stages read specs from disk).
    """

    base_url: str = Field(description="the server's OpenAI API root, e.g. http://127.0.0.1:8000/v1")
    model: str = Field("policy", description="served model name")
    api_key_env: str = Field("LUDIC_VLLM_API_KEY", description="environment variable holding the API key")


class VLLMConfig(WeightPush, VLLMServing):
    """The vLLM config a training flow takes (`rl_train`'s and `pipeline_rl`'s `vllm:`):
    which server (`VLLMServing`), how weights go into it (`WeightPush`), and how often a
    stage is tried when the server dies. Every vLLM field is stated once, in one of
    `VLLMServerConfig` (launching), `VLLMServing` and `WeightPush`."""

    stage_attempts: int = bounded(3, ge=1, le=MAX_ATTEMPTS,
                                  description="tries per stage, restarting our server in between")

    def endpoint(self, base_url: str, model: str, api_key_env: str) -> VLLMEndpoint:
        """The stages' view of the server this config chose, once it runs at `base_url`."""
        return VLLMEndpoint(base_url=base_url, model=model, api_key_env=api_key_env, bucket_mb=self.bucket_mb,
                            lora=self.lora)
