"""The reasoning-gym recipe holds together: its teacher plays its env, the replies
fit the agent's budget, the evaluation is held out, and `ludic demo --recipe
reasoning_gym` runs the chain and reports each task."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flows.demo import DemoConfig, rl_stage
from ludic_core.envs.reasoning_gym import EVAL_SCORERS, ReasoningGymEnv, reasoning_gym_answer
from ludic_core.recipes.recipe import get_recipe

ROOT = Path(__file__).resolve().parents[2]
RECIPE = get_recipe("reasoning_gym")


def test_the_teacher_gets_reward_1_within_the_agents_token_budget():
    env, teacher = ReasoningGymEnv(**RECIPE.env.kwargs), reasoning_gym_answer(**RECIPE.teacher_kwargs)
    longest = 0
    for seed in range(150):
        question = env.reset(seed=seed)["agent_0"][0]
        reply = teacher([{"role": "user", "content": question}])
        longest = max(longest, len(reply.encode()) + 1)  # byte-level tokenizer: a token per byte, plus eos
        assert env.step({"agent_0": reply.removeprefix("<answer>").removesuffix("</answer>")})["agent_0"].reward == 1
    assert longest <= RECIPE.agent.sampling.max_tokens, longest


def test_the_evaluation_plays_other_entries_of_the_same_tasks():
    assert RECIPE.eval_env.kwargs == {**RECIPE.env.kwargs, "seed": RECIPE.env.kwargs["seed"] + 1}
    assert set(RECIPE.env.kwargs["tasks"]).isdisjoint(EVAL_SCORERS)
    assert list(RECIPE.table.values())[:-1] == [f"{t}/accuracy" for t in RECIPE.env.kwargs["tasks"]]
    assert rl_stage(DemoConfig(recipe="reasoning_gym"), RECIPE, "m").env == RECIPE.env


@pytest.mark.heavy  # 70-130 s; the tic-tac-toe chain test covers the same flow in `make test`
def test_ludic_demo_runs_the_reasoning_gym_chain(tmp_path, prefect_db):
    from tests.prefect_db import seed_home

    seed_home(tmp_path / "prefect-home", prefect_db)  # the tic-tac-toe chain's test migrates an empty one
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
           "COLUMNS": "200"}  # rich would shorten the task columns' names to fit 80
    args = ["demo", "--recipe", "reasoning_gym", "--out", str(tmp_path / "run"), "--sft-steps", "3",
            "--rl-steps", "1", "--teacher-episodes", "32", "--eval-episodes", "6"]
    res = subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for text in ("before SFT", "after SFT", "after RL", *RECIPE.table):
        assert text in res.stdout, res.stdout[-3000:]
    assert (tmp_path / "run" / "rl" / "checkpoints" / "step_00000001").is_dir()
