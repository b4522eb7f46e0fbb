"""A recipe: one env's settings for the whole chain, stated once.

rejection sampling -> SFT -> RL -> evaluation take the same env and agent, so
a recipe is just those configs plus the teacher and the keep rule. Tic-tac-toe,
arithmetic, reasoning-gym and TextArena's TicTacToe are such values (`RECIPES`), not code paths: the flows
that run them are the ones a user runs on their own env.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from ludic_core.bounds import MAX_BATCH, MAX_EPISODES, MAX_SEED, MAX_SEQ_LEN, MAX_STEPS, bounded
from ludic_core.compose.configs import AgentConfig, BranchConfig, EnvConfig
from ludic_core.config import RL_TRAINER, AlgorithmConfig, GRPOConfig
from ludic_core.frozen import FrozenModel
from ludic_core.rejection import KeepRule

__all__ = ["Recipe", "RECIPES", "get_recipe"]


class Recipe(FrozenModel):
    name: str
    env: EnvConfig = Field(description="the env the teacher plays, and RL (with rl_env_kwargs added)")
    eval_env: EnvConfig = Field(description="the env evaluations play (held-out problems where the env has them)")
    agent: AgentConfig
    teacher: str = Field(description="scripted teacher policy factory (registered name or import path)")
    teacher_kwargs: dict[str, Any] = Field(default_factory=dict)
    keep: KeepRule = KeepRule(min_return=1.0)
    teacher_episodes: int = bounded(4096, ge=1, le=MAX_EPISODES,
                                    description="episodes the teacher plays for the demo chain's rejection sampling")
    sft_steps: int = bounded(400, ge=1, le=MAX_STEPS, description="SFT steps of the demo chain")
    sft_batch_size: int = bounded(64, ge=1, le=MAX_BATCH, description="examples per SFT step of the demo chain")
    rl_temperature: float = Field(1.0, gt=0.0, description="sampling temperature of RL rollouts")
    rl_steps: int = bounded(30, ge=1, le=MAX_STEPS, description="RL steps of the demo chain (generated batches)")
    rl_algorithm: AlgorithmConfig = Field(GRPOConfig(group_size=8), description="the demo chain's RL algorithm, "
                                          "any the rl_train flow takes (GRPO's group size, credit, rollout reuse, ...)")
    rl_lr: float = Field(RL_TRAINER.lr, gt=0.0, description="learning rate of the demo chain's RL stage")
    rl_requests_per_step: int = bounded(8, ge=1, le=MAX_BATCH, description="prompts (env seeds) per RL step; "
                                        "each is played as many times as the algorithm samples a prompt "
                                        "(GRPO: group_size)")
    max_seq_len: int = bounded(RL_TRAINER.max_seq_len, ge=2, le=MAX_SEQ_LEN,
                               description="tokens of one training item (prompt and reply): the demo chain's SFT and "
                                           "RL stages train at it")
    rl_branch: BranchConfig | None = Field(None, description="the RL stage's branching: groups restarted at states "
                                                             "its episodes reached (None = off)")
    rl_env_kwargs: dict[str, Any] = Field(
        default_factory=dict, description="added to env's kwargs for RL only: a training reward (e.g. shaping) "
                                          "that the teacher's data and the evaluations must not see")
    eval_seed: int = bounded(100_000, ge=0, le=MAX_SEED, description="first env seed of evaluations")
    eval_episodes: int = bounded(400, ge=1, le=MAX_EPISODES, description="greedy episodes per evaluation")
    table: dict[str, str] = Field(description="demo table column -> metric key")

    @property
    def rl_env(self) -> EnvConfig:
        """The env RL trains on: `env` with `rl_env_kwargs` on top."""
        if not self.rl_env_kwargs:
            return self.env
        return self.env.model_copy(update={"kwargs": {**self.env.kwargs, **self.rl_env_kwargs}})


def _recipes() -> dict[str, Recipe]:
    from ludic_core.recipes import arithmetic, arithmetic_tools, reasoning_gym, textarena, tic_tac_toe

    return {"tic_tac_toe": tic_tac_toe.RECIPE, "arithmetic": arithmetic.RECIPE, "reasoning_gym": reasoning_gym.RECIPE,
            "textarena": textarena.RECIPE, "arithmetic_tools": arithmetic_tools.RECIPE,
            "arithmetic_tools_none": arithmetic_tools.NO_TOOLS}


RECIPES: tuple[str, ...] = ("tic_tac_toe", "arithmetic", "reasoning_gym", "textarena", "arithmetic_tools",
                            "arithmetic_tools_none")


def get_recipe(name: str) -> Recipe:
    recipes = _recipes()
    if name not in recipes:
        raise ValueError(f"unknown recipe {name!r}; choose one of {sorted(recipes)}")
    return recipes[name]
