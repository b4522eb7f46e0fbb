"""Plain data that flows between envs, agents, inference and training.

Everything here is a dataclass with a lossless JSON round trip (`to_dict` /
`from_dict`): rollouts are written to JSONL and pushed through queues, and we
never pickle. Token ids and sampling log-probs travel inside `TokenTrace` so the
trainer never has to re-tokenise text.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass, field
from typing import Any, Mapping

__all__ = [
    "Message",
    "TokenTrace",
    "ChatResponse",
    "StepOutcome",
    "Step",
    "Rollout",
]

# {"role": "system|user|assistant|tool", "content": str, optional "tool_calls",
#  "tool_call_id", "name"}; a dict so it passes straight into chat templates.
Message = dict[str, Any]


def _int_list(value: Any, name: str) -> list[int]:
    if not isinstance(value, (list, tuple)) or not all(
        isinstance(v, int) and not isinstance(v, bool) for v in value
    ):
        raise TypeError(f"{name} must be a list of ints, got {type(value).__name__}")
    return list(value)


@dataclass(frozen=True)
class TokenTrace:
    """Token-in/token-out record of one model call.

    `completion_logprobs[i]` is log p(completion_token_ids[i]) under the
    distribution actually sampled from (after temperature / top-p), which is
    what the trainer's importance ratio needs. `policy_version` names the
    weights that produced the completion.
    """

    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float] | None = None
    finish_reason: str | None = None
    policy_version: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(
            self, "prompt_token_ids", _int_list(self.prompt_token_ids, "prompt_token_ids")
        )
        object.__setattr__(
            self,
            "completion_token_ids",
            _int_list(self.completion_token_ids, "completion_token_ids"),
        )
        if self.completion_logprobs is not None:
            lps = [float(x) for x in self.completion_logprobs]
            if len(lps) != len(self.completion_token_ids):
                raise ValueError(
                    "completion_logprobs has "
                    f"{len(lps)} entries for {len(self.completion_token_ids)} completion tokens"
                )
            if any(math.isnan(x) or x > 1e-6 for x in lps):
                raise ValueError("completion_logprobs must be finite-or--inf values <= 0")
            object.__setattr__(self, "completion_logprobs", lps)

    def to_dict(self) -> dict[str, Any]:
        return {
            "prompt_token_ids": list(self.prompt_token_ids),
            "completion_token_ids": list(self.completion_token_ids),
            "completion_logprobs": None
            if self.completion_logprobs is None
            else list(self.completion_logprobs),
            "finish_reason": self.finish_reason,
            "policy_version": self.policy_version,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TokenTrace:
        for key in ("prompt_token_ids", "completion_token_ids"):
            if key not in data:
                raise ValueError(f"TokenTrace dict is missing {key!r}")
        return cls(
            prompt_token_ids=data["prompt_token_ids"],
            completion_token_ids=data["completion_token_ids"],
            completion_logprobs=data.get("completion_logprobs"),
            finish_reason=data.get("finish_reason"),
            policy_version=data.get("policy_version"),
        )


@dataclass
class ChatResponse:
    """Normalised output of one chat completion, whatever the backend."""

    text: str
    prompt_token_ids: list[int] = field(default_factory=list)
    completion_token_ids: list[int] = field(default_factory=list)
    completion_logprobs: list[float] | None = None
    finish_reason: str | None = None  # "stop" | "length" | "tool_calls"
    policy_version: int | None = None
    # OpenAI-style [{"id", "type": "function", "function": {"name", "arguments"}}]
    tool_calls: list[dict[str, Any]] | None = None

    def to_trace(self) -> TokenTrace:
        return TokenTrace(
            prompt_token_ids=list(self.prompt_token_ids),
            completion_token_ids=list(self.completion_token_ids),
            completion_logprobs=None
            if self.completion_logprobs is None
            else list(self.completion_logprobs),
            finish_reason=self.finish_reason,
            policy_version=self.policy_version,
        )


@dataclass
class StepOutcome:
    """What an environment returns to one agent after a step."""

    obs: str | None
    reward: float
    truncated: bool = False
    terminated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Step:
    """One agent turn: the observation it saw, what it said, what came back."""

    index: int
    prev_obs: str
    action: str
    next_obs: str | None
    reward: float
    truncated: bool = False
    terminated: bool = False
    info: dict[str, Any] = field(default_factory=dict)
    trace: TokenTrace | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "prev_obs": self.prev_obs,
            "action": self.action,
            "next_obs": self.next_obs,
            "reward": self.reward,
            "truncated": self.truncated,
            "terminated": self.terminated,
            "info": self.info,
            "trace": None if self.trace is None else self.trace.to_dict(),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        trace = data.get("trace")
        return cls(
            index=int(data["index"]),
            prev_obs=data["prev_obs"],
            action=data["action"],
            next_obs=data.get("next_obs"),
            reward=float(data["reward"]),
            truncated=bool(data.get("truncated", False)),
            terminated=bool(data.get("terminated", False)),
            info=dict(data.get("info") or {}),
            trace=None if trace is None else TokenTrace.from_dict(trace),
        )


@dataclass
class Rollout:
    """One agent's view of one episode.

    `meta` carries lineage: agent_id, env kind, env/sampling seeds, group_id,
    and `failed`/`error` when the episode died mid-way (its steps are kept).
    """

    steps: list[Step] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)
    id: str = field(default_factory=lambda: uuid.uuid4().hex)

    @property
    def total_reward(self) -> float:
        return float(sum(s.reward for s in self.steps))

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def failed(self) -> bool:
        return bool(self.meta.get("failed", False))

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "meta": self.meta, "steps": [s.to_dict() for s in self.steps]}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Rollout:
        if "steps" not in data:
            raise ValueError("Rollout dict is missing 'steps'")
        return cls(
            id=str(data.get("id") or uuid.uuid4().hex),
            meta=dict(data.get("meta") or {}),
            steps=[Step.from_dict(s) for s in data["steps"]],
        )
