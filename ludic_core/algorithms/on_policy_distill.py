"""On-policy distillation: the student samples, a teacher scores every token it wrote.

Each sampled token's credit is the teacher's log-prob of it minus the sampler's
(the negative per-token reverse KL; `losses/distillation.py`), optionally plus
the env's reward as ordinary credit (`reward_coef`: group-normalised when the
config has groups, the episode return otherwise). Unlike SFT on a teacher's
samples it trains in the states the student itself reaches, mistakes included,
and every token gets its own signal instead of one reward per episode.

With `top_k` K the teacher says more at the same positions: its K likeliest
tokens, and the loss is the exact reverse KL to them (plus one bucket for the
rest of the vocabulary), differentiated directly rather than through the sampled
token (`TopKDistillLoss`; GKD's full-distribution form, K = the vocabulary
giving the full KL). On tic-tac-toe the sampled form did not move a weak
student; the top-k form learned, though per CPU second slower than SFT on the
teacher's kept samples, on count_bits too (docs/results.md).

The teacher is a model dir scored in-process or a vLLM server (prompt
log-probs over the student's ids; sampled tokens only, so no `top_k`); either must share the student's tokenizer
(`training/teacher.py` refuses another, naming it). The trainer scores each train
step's items once, before its updates, and logs `teacher_seconds`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from ludic_core import losses
from ludic_core.algorithms.base import AlgorithmBase, preset
from ludic_core.algorithms.reuse import RolloutReuse
from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.bounds import MAX_GROUP, bounded
from ludic_core.credit import ConstantCredit, CreditAssigner, EpisodicReturn, GroupNormalizedReturn
from ludic_core.frozen import FrozenModel

__all__ = ["DistillTeacher", "OnPolicyDistillConfig", "make_on_policy_distill", "MAX_TOP_K"]

#: The largest `top_k`: each scored position carries K ids and log-probs (items, micro-batches and,
#: under torchrun, the ranks' exchange), so K stays far below a real model's vocabulary.
MAX_TOP_K = 1024


class DistillTeacher(FrozenModel):
    """Where the teacher's log-probs come from: exactly one of `model_path` and `base_url`."""

    model_path: str | None = Field(None, description="a model dir, scored in the trainer's process")
    base_url: str | None = Field(None, description="a vLLM server's OpenAI root (http://host:port/v1): prompt "
                                                   "log-probs over the student's ids; serve it without LoRA "
                                                   "slots")
    served_model: str | None = Field(None, description="the model's name on that server (None: its only one)")
    api_key_env: str | None = Field(None, description="the environment variable holding that server's API key "
                                                      "(never the key itself: parameters show in the UI)")
    concurrency: int = bounded(8, ge=1, le=256, description="requests in flight to the server")
    token_budget: int = bounded(16_384, ge=1, le=1 << 24,
                                description="padded tokens per forward of an in-process teacher")

    @model_validator(mode="after")
    def _one_source(self) -> DistillTeacher:
        if (self.model_path is None) == (self.base_url is None):
            raise ValueError("a distillation teacher is a model dir (model_path) or a vLLM server (base_url): "
                             f"give exactly one, got model_path={self.model_path!r}, base_url={self.base_url!r}")
        return self


class OnPolicyDistillConfig(AlgorithmBase):
    """Per-token reverse-KL credit from a teacher on the student's own samples (+ env reward)."""

    type: Literal["on_policy_distill"] = "on_policy_distill"
    teacher: DistillTeacher = Field(description="the teacher: a model dir or a vLLM server, same tokenizer")
    teacher_coef: float = Field(1.0, ge=0.0, description="weight of the teacher's per-token log-ratio")
    reward_coef: float = Field(0.0, ge=0.0, description="weight of the env's reward as credit (0 = pure "
                                                        "distillation)")
    group_size: int | None = bounded(None, ge=2, le=MAX_GROUP,
                                     description="None: one sample per prompt; else groups, and the reward "
                                                 "credit is group-normalised")
    clip_low: float = Field(0.2, ge=0.0, lt=1.0)
    clip_high: float = Field(0.2, ge=0.0)
    reuse: RolloutReuse = Field(RolloutReuse(), description="optimiser updates per generated batch: mini_batches x "
                                                            "epochs (default 1 x 1)")
    top_k: int | None = bounded(None, ge=1, le=MAX_TOP_K,
                                description="None: credit each sampled token by the teacher's log-ratio; K: the exact "
                                            "KL to the teacher's K likeliest tokens at each position and the rest of "
                                            "the vocabulary (an in-process teacher; K >= the vocabulary: the full "
                                            "KL; at most 1024, as every position stores K ids and log-probs)")

    divergence: Literal["reverse", "forward"] = Field(
        "reverse", description="with top_k: 'reverse' KL(student || teacher), mode-seeking; 'forward' KL(teacher || "
                               "student), the teacher's distribution as a soft label on the student's own states")

    @model_validator(mode="after")
    def _some_signal(self) -> OnPolicyDistillConfig:
        if self.teacher_coef == 0.0 and self.reward_coef == 0.0:
            raise ValueError("teacher_coef and reward_coef are both 0: nothing to learn from")
        if self.top_k is not None and self.teacher.base_url is not None:
            raise ValueError(f"top_k={self.top_k} reads the teacher's likeliest tokens at each position, which the "
                             "vLLM teacher (base_url) does not give here: use an in-process teacher (model_path), "
                             "or top_k None")
        if self.top_k is None and self.divergence != "reverse":
            raise ValueError(f"divergence {self.divergence!r} needs top_k: the sampled tokens' log-ratio estimates the "
                             "reverse KL only")
        if self.top_k is not None and self.teacher_coef == 0.0:
            raise ValueError(f"top_k={self.top_k} with teacher_coef 0: the teacher's distribution would weigh nothing")
        return self

    def samples_per_prompt(self) -> int:
        return self.group_size or 1

    def rollout_reuse(self) -> RolloutReuse:
        return self.reuse

    def teacher_spec(self) -> DistillTeacher:
        return self.teacher

    def build(self) -> RLAlgorithm:
        loss: losses.Loss
        if self.top_k is None:
            loss = losses.OnPolicyDistillLoss(self.teacher_coef, self.reward_coef, self.clip_low, self.clip_high)
        else:
            loss = losses.TopKDistillLoss(self.top_k, self.divergence, self.teacher_coef, self.reward_coef,
                                          self.clip_low, self.clip_high)
        return RLAlgorithm(self.type, self._credit(), loss, reuse=self.reuse, group_size=self.group_size or 1)

    def _credit(self) -> CreditAssigner:
        if self.reward_coef == 0.0:
            return ConstantCredit(0.0)  # the loss reads the teacher alone
        if self.group_size:
            return GroupNormalizedReturn(expected_group_size=self.group_size)
        return EpisodicReturn()


make_on_policy_distill = preset(OnPolicyDistillConfig)
