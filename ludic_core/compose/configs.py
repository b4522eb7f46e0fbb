"""What a run plays and how the agent talks: plain, JSON-able configs.

Every flow (rejection sampling, SFT, RL, evaluate) takes the same `EnvConfig`
and `AgentConfig`, so the Prefect UI shows the same fields everywhere and a
YAML file written for one flow's env works in the next. Torch-free: these load
in a UI form or on a Prefect server that never imports a model. Names are only
checked for syntax here; `ludic_core.compose.build` resolves them at first use
(the user's package may be installed on the worker but not on the server).
`EnvConfig` is defined beside the rollout requests that carry it and re-exported here.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field, field_validator

from ludic_core.bounds import MAX_BATCH, MAX_SEED, MAX_STRIDE, MAX_TURNS, bounded
from ludic_core.frozen import FrozenModel
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.registry import check_ref
from ludic_core.rollout.requests import EnvConfig  # one description of an env, which requests carry too

__all__ = ["ComponentConfig", "EnvConfig", "AgentConfig", "SeedSchedule", "BranchConfig", "BRANCH_HELP"]


class ComponentConfig(FrozenModel):
    """A parser or context strategy: a registered name or `pkg.mod:Factory`, plus keyword arguments.

    Its kwargs belong to its name: a partial mapping naming another component
    replaces a default one whole (see `FrozenModel`), it never inherits its kwargs."""

    merge_identity: ClassVar[tuple[str, ...]] = ("name",)

    name: str = Field(description="registered name or import path 'package.module:Factory'")
    kwargs: dict[str, Any] = Field(default_factory=dict, description="keyword arguments for the factory")


class AgentConfig(FrozenModel):
    """How the policy sees the env and answers it."""

    parser: ComponentConfig = Field(
        ComponentConfig(name="identity"),
        description="turns a reply into an action: identity | xml_tag {tag} | think_prefix | boxed | code_block | "
                    "import path; every one but identity takes failure_penalty (the reward of a malformed reply, "
                    "default 0: the env's scale)")
    context: ComponentConfig = Field(
        ComponentConfig(name="full_dialog"),
        description="what the model sees: full_dialog | sliding_window {keep_last} | truncated_thinking | import path")
    system_prompt: str | None = Field(None, description="None = the env's suggested system prompt; \"\" = no system message")
    sampling: SamplingConfig = Field(SamplingConfig(), description="temperature (0 = greedy), max_tokens, stop, ...")
    max_turns: int = bounded(16, ge=1, le=MAX_TURNS,
                             description="agent turns per episode; an episode still running is truncated")
    max_parse_failures: int | None = bounded(
        None, ge=1, le=MAX_TURNS,
        description="end the episode after this many unparseable replies in a row (None = never)")
    tools: tuple[str, ...] = Field((), description="tool functions by import path 'pkg.mod:fn' or registered name")

    @field_validator("parser", "context")
    @classmethod
    def _component(cls, v: ComponentConfig, info: Any) -> ComponentConfig:
        check_ref(info.field_name, v.name)
        return v

    @field_validator("tools")
    @classmethod
    def _tools(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for ref in v:
            check_ref("tool", ref)
        return v


class SeedSchedule(FrozenModel):
    """Which episodes to run: env seeds `start, start+1, ...`.

    Seeded envs pick their start state (a board, a problem, a dataset row) from
    the seed, so consecutive seeds walk a prompt dataset row by row
    (`dataset_qa` plays row `seed % rows`)."""

    start: int = bounded(0, ge=0, le=MAX_SEED, description="first env seed")
    stride: int = bounded(1, ge=1, le=MAX_STRIDE, description="seed step between consecutive episodes")

    def seeds(self, n: int, offset: int = 0) -> list[int]:
        return [self.start + (offset + i) * self.stride for i in range(n)]


#: the `branch` field's help, on every config that draws rollouts
BRANCH_HELP = ("also play groups restarted at states the drawn episodes reached: actions compared on one state "
               "(None = off)")


class BranchConfig(FrozenModel):
    """Branching: compare actions on the states the policy itself reaches.

    A group shares only its start: after the first action the siblings' states
    differ, so later actions are compared across different states. With
    branching, after each draw `states` distinct states the agent faced in the
    drawn episodes are picked (at random, seeded by the step) and the env is
    restarted at each one, played group_size times: each such group compares
    actions on one state (VinePPO's and TreeRL's idea). The env's class must offer
    `branch_kwargs(obs) -> dict | None`, the kwargs that restart it at the state
    an observation shows; tic-tac-toe's cut the game after one move, so the
    step's reward must be that action's own worth (a process reward, credit
    with gamma 0). The drawn episodes are trained on as well.
    """

    states: int = bounded(32, ge=1, le=MAX_BATCH, description="states branched per step, each played group_size "
                                                              "times")
