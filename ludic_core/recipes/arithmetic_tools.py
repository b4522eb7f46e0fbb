"""Arithmetic with a calculator: the tool-use recipe.

Half the problems are one +/- of numbers up to 20 (a tiny model can learn those
in its head: the arithmetic recipe's scores 0.99 on them), half a product of two
2-digit numbers (it cannot: there a correct answer needs the `calculator` tool).
The teacher (`arithmetic_tool_teacher`) calls the calculator on a quarter of
the questions, chosen blind to their difficulty, and works the rest out in its
head. SFT then teaches the format and the teacher's indifference: a student
that calls with probability 0.25 almost never calls when played greedily. RL,
sampling, finds that calls pay (on the products; seed 0 learnt to call on every
problem, since its head is right on few of the easy ones either).
A teacher calling on half the questions leaves the greedy student's choice to
noise (the experiments page of 2026-11-29).

The agent is a `ToolAgent` (named tools in `AgentConfig.tools`): a call and its
result happen inside one env step, and each model call is a training item with
the tool output in its (untrained) prompt.
"""

from __future__ import annotations

from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.recipes.recipe import Recipe

__all__ = ["RECIPE", "NO_TOOLS"]

_AGENT = AgentConfig(
    system_prompt="",
    parser=ComponentConfig(name="xml_tag", kwargs={"tag": "answer", "failure_penalty": -1.0}),
    # the teacher's call, <tool_call>{"name": "calculator", "arguments": {"expression": "37 * 48"}}</tool_call>,
    # is 83 bytes + eos; slack lets a confused model fail visibly
    sampling=SamplingConfig(max_tokens=112),
    max_turns=1,
    tools=("calculator",),
)

RECIPE = Recipe(
    name="arithmetic_tools",
    env=EnvConfig(name="arithmetic", kwargs={"n": 4000, "seed": 0, "difficulty": "mixed"}),
    eval_env=EnvConfig(name="arithmetic", kwargs={"n": 300, "seed": 1, "difficulty": "mixed"}),
    agent=_AGENT,
    teacher="arithmetic_tool_teacher",
    teacher_kwargs={"tool_rate": 0.25},
    sft_steps=800,
    rl_temperature=1.0,
    rl_lr=1e-4,  # the choice to call is a first-token decision RL must move, not a polish of a near-perfect start
    max_seq_len=768,  # the answer turn: tools line, question, a call of up to max_tokens, its result, the reply
    eval_seed=0,
    eval_episodes=300,
    table={"accuracy": "success_rate", "tool calls": "tool_calls_per_episode",
           "tool errors": "tool_errors_per_episode", "tokens": "mean_completion_tokens",
           "parse errors": "parse_error_rate"},
)

#: The same task taught without tools: the teacher always works in its head and the agent is offered none
#: (the "SFT without tools" row of the recipe's table).
NO_TOOLS = RECIPE.model_copy(update={
    "name": "arithmetic_tools_none", "agent": _AGENT.model_copy(update={"tools": ()}),
    "teacher_kwargs": {"tool_rate": 0.0}})
