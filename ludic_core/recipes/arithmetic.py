"""Arithmetic recipe: offline GSM8K-style word problems, graded numerically.

The teacher is an oracle that solves the generated questions; evaluation uses
a held-out problem set (another generator seed), one episode per problem.
"""

from __future__ import annotations

from ludic_core.inference.sampling import SamplingConfig
from ludic_core.recipes.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.recipes.recipe import Recipe

__all__ = ["RECIPE"]

RECIPE = Recipe(
    name="arithmetic",
    env=EnvConfig(name="arithmetic", kwargs={"n": 4000, "seed": 0, "difficulty": "easy"}),
    eval_env=EnvConfig(name="arithmetic", kwargs={"n": 300, "seed": 1, "difficulty": "easy"}),
    agent=AgentConfig(parser=ComponentConfig(name="xml_tag", kwargs={"tag": "answer"}),
                      sampling=SamplingConfig(max_tokens=20), max_turns=1),
    teacher="arithmetic_oracle",
    rl_temperature=1.0,
    eval_seed=0,  # seeds 0..299 walk the held-out problems once each
    eval_episodes=300,
    table={"accuracy": "success_rate", "parse errors": "parse_error_rate"},
)
