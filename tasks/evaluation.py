"""Evaluation task: a policy's tic-tac-toe rates as X and as O."""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE

from ludic_core.config import LocalInferenceConfig
from ludic_core.inference import LocalChatClient
from ludic_core.recipes.tic_tac_toe import evaluate_tic_tac_toe


@task(name="evaluate-tic-tac-toe", cache_policy=NO_CACHE, retries=1)
def evaluate_policy(model_path: str, *, games_per_mark: int, opponent: str = "random",
                    temperature: float = 0.0, local: LocalInferenceConfig | None = None) -> dict[str, float]:
    client = LocalChatClient(model_path, **(local or LocalInferenceConfig()).model_dump())
    return evaluate_tic_tac_toe(client, games_per_mark=games_per_mark, opponent=opponent,
                                temperature=temperature)
