"""Torch-free configs: algorithms (a discriminated union on `type`) and training.

Configs load anywhere (a Prefect UI form, a YAML file, a test) without
importing torch; `ludic_core.algorithms.build_algorithm` turns an algorithm
config into objects. Frozen and `extra="forbid"`, so a typo fails naming the
field instead of being silently ignored.
"""

from __future__ import annotations

from pathlib import PurePath
from typing import Annotated, Any, Literal, Union

from pydantic import Field, model_validator

from ludic_core.bounds import (MAX_BATCH, MAX_BUCKET_MB, MAX_CHECKPOINTS, MAX_CONCURRENCY, MAX_DRAWS, MAX_GROUP,
                               MAX_LORA_RANK, MAX_SEED, MAX_SEQ_LEN, MAX_STEPS, MAX_TOKEN_BUDGET, bounded)
from ludic_core.frozen import FrozenModel
from ludic_core.specs import DEVICE_DOC, DEVICE_PATTERN, DType

__all__ = [
    "ReinforceConfig",
    "ReinforceBaselineConfig",
    "GRPOConfig",
    "GSPOConfig",
    "CISPOConfig",
    "SFTConfig",
    "ScaleRLConfig",
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
    "VLLMEndpoint",
]

Beta = Annotated[float, Field(ge=0.0, lt=1.0)]


class DynamicSampling(FrozenModel):
    """DAPO's dynamic sampling. A group whose episodes all end with the same
    return has zero advantage and teaches nothing (most groups, once a policy is
    good at a game), so each step draws request batches until it holds
    `min_groups` groups with a return spread, or `max_draws` batches were drawn,
    and trains on those groups only. The step's metrics count both."""

    min_groups: int = bounded(ge=1, le=MAX_BATCH, description="groups with a return spread each step needs")
    max_draws: int = bounded(4, ge=1, le=MAX_DRAWS,
                             description="request batches drawn at most per step (then train on what there is)")


_DYNAMIC = "None = off; else draw more request batches until enough groups carry signal (DAPO)"


class RolloutReuse(FrozenModel):
    """Several optimiser updates per generated batch (`training/rollout_reuse.py`): `epochs` passes
    over it, each cut into `mini_batches` updates, against the sampler's log-probs. From the second
    update on the ratio departs from 1 and clipping acts. Each update is one policy version, so a
    batch makes `mini_batches x epochs` versions: `trainer.max_lag` counts them."""

    mini_batches: int = bounded(1, ge=1, le=MAX_BATCH, description="optimiser updates per pass over a batch "
                                                                   "(a group stays in one mini-batch)")
    epochs: int = bounded(1, ge=1, le=MAX_DRAWS, description="passes over each generated batch")

    @property
    def updates(self) -> int:
        """Optimiser updates (policy versions) per generated batch."""
        return self.mini_batches * self.epochs


_REUSE = "optimiser updates per generated batch: mini_batches x epochs (default 1 x 1, each rollout used once)"


class ReinforceConfig(FrozenModel):
    """Plain REINFORCE on the episode return (no baseline)."""

    type: Literal["reinforce"] = "reinforce"
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount for per-step returns")


class ReinforceBaselineConfig(FrozenModel):
    """REINFORCE minus the batch-mean return: same expectation, less variance."""

    type: Literal["reinforce_baseline"] = "reinforce_baseline"


class GRPOConfig(FrozenModel):
    """Group-normalised returns + token-level clipped surrogate (+ optional KL)."""

    type: Literal["grpo"] = "grpo"
    group_size: int | None = bounded(None, ge=2, le=MAX_GROUP, description="expected episodes per group (checked)")
    normalize_std: bool = Field(True, description="divide by the group std (Dr.GRPO sets False)")
    credit: Literal["episode", "turn"] = Field(
        "episode", description="episode: every turn gets its episode's group-relative return; turn: each turn's "
        "reward-to-go against its siblings' at the same turn index (multi-turn games; see README)")
    gamma: float = Field(1.0, ge=0.0, le=1.0, description="discount of the reward-to-go (credit=turn only)")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    clip_high: float = Field(0.2, ge=0.0, description="DAPO's clip-higher raises this (e.g. 0.28)")
    loss_reduction: Literal["token", "sequence"] = Field(
        "token", description="token: mean over all tokens of the batch (long replies weigh more, DAPO); "
        "sequence: mean per reply, then over replies (the GRPO paper)")
    sampler_correction: Literal["none", "token_tis", "token_mis", "seq_tis", "seq_mis"] = Field(
        "none", description="none: ratios against the sampler's log-probs; else ratios against the trainer's own "
        "and an importance weight trainer/sampler, truncated (tis) or masked (mis) above sampler_cap, per token "
        "or per sequence")
    sampler_cap: float = Field(2.0, gt=0.0, description="cap of the sampler importance weight")
    kl_coef: float = Field(0.0, ge=0.0, description="weight of a k3 KL penalty (0 = off)")
    kl_to: Literal["reference", "behaviour"] = Field(
        "reference", description="reference: the frozen model the run started from (kept by the trainer, bf16 on "
        "GPU); behaviour: the sampler's policy (0 in synchronous training: it bites only on stale batches)")
    entropy_coef: float = Field(0.0, ge=0.0)
    dynamic_sampling: DynamicSampling | None = Field(None, description=_DYNAMIC)
    reuse: RolloutReuse = Field(RolloutReuse(), description=_REUSE)

    @model_validator(mode="after")
    def _gamma_needs_turn_credit(self) -> GRPOConfig:
        if self.gamma != 1.0 and self.credit != "turn":
            raise ValueError(f"gamma={self.gamma} discounts per-turn returns: it needs credit='turn'")
        if self.sampler_correction != "none" and self.reuse.updates > 1:
            raise ValueError(f"sampler_correction={self.sampler_correction!r} takes the ratio against the trainer's "
                             "current log-probs, which only equal the behaviour policy's on a batch's first update: "
                             "use it with reuse 1 x 1, or reuse with sampler_correction 'none'")
        return self


class GSPOConfig(FrozenModel):
    """Group-normalised returns + sequence-level clipped ratio (GSPO)."""

    type: Literal["gspo"] = "gspo"
    group_size: int | None = bounded(None, ge=2, le=MAX_GROUP, description="episodes per group (checked)")
    clip_low: float = Field(3e-4, ge=0.0, lt=1.0)
    clip_high: float = Field(4e-4, ge=0.0)
    dynamic_sampling: DynamicSampling | None = Field(None, description=_DYNAMIC)
    reuse: RolloutReuse = Field(RolloutReuse(), description=_REUSE)


class CISPOConfig(FrozenModel):
    """Group-normalised returns + clipped, detached importance weights (CISPO)."""

    type: Literal["cispo"] = "cispo"
    group_size: int | None = bounded(None, ge=2, le=MAX_GROUP, description="episodes per group (checked)")
    eps_high: float = Field(2.0, gt=0.0, description="IS weight capped at 1 + eps_high")
    dynamic_sampling: DynamicSampling | None = Field(None, description=_DYNAMIC)
    reuse: RolloutReuse = Field(RolloutReuse(), description=_REUSE)


class SFTConfig(FrozenModel):
    """Masked cross-entropy on the completion tokens (behaviour cloning)."""

    type: Literal["sft"] = "sft"


class ScaleRLConfig(FrozenModel):
    """ScaleRL recipe: CISPO loss, group-mean centring with batch-level std, and
    zero-variance groups filtered out (they carry no signal)."""

    type: Literal["scalerl"] = "scalerl"
    group_size: int | None = bounded(None, ge=2, le=MAX_GROUP, description="episodes per group (checked)")
    eps_high: float = Field(2.0, gt=0.0)
    dynamic_sampling: DynamicSampling | None = Field(None, description=_DYNAMIC)
    reuse: RolloutReuse = Field(RolloutReuse(), description=_REUSE)


AlgorithmConfig = Annotated[
    Union[
        ReinforceConfig,
        ReinforceBaselineConfig,
        GRPOConfig,
        GSPOConfig,
        CISPOConfig,
        SFTConfig,
        ScaleRLConfig,
    ],
    Field(discriminator="type"),
]


def reuse_of(algorithm: Any) -> RolloutReuse:
    """An algorithm's (config's or built one's) rollout reuse; 1 x 1 for those without it."""
    reuse = getattr(algorithm, "reuse", None)
    return reuse if reuse is not None else RolloutReuse()


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
    size = getattr(algorithm, "group_size", None)
    if size is None and hasattr(algorithm, "group_size"):
        raise ValueError(f"algorithm {algorithm.type!r} compares samples of one prompt: set its group_size")
    return int(size or 1)


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


class VLLMEndpoint(FrozenModel):
    """Roll out through a running vLLM server and publish weights into it.

    The API key is read from the environment variable `api_key_env`, so it is
    never written into a spec file (torchrun stages read specs from disk).
    """

    base_url: str = Field(description="the server's OpenAI API root, e.g. http://127.0.0.1:8000/v1")
    model: str = Field("policy", description="served model name")
    api_key_env: str = Field("LUDIC_VLLM_API_KEY", description="environment variable holding the API key")
    bucket_mb: int = bounded(64, ge=1, le=MAX_BUCKET_MB, description="weight-push bucket size")
    lora: AdapterPublishing = Field(AdapterPublishing(), description="how a LoRA run publishes into the server")
