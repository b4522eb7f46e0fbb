"""Environments: the `LudicEnv` interface and the bundled envs.

Imports stay light (no torch, no `datasets`) so envs load in rollout workers
that never touch a model.
"""

from ludic_core.envs.arithmetic import ArithmeticEnv, generate_arithmetic_problems
from ludic_core.envs.base import EnvError, LudicEnv, PolicyResolver
from ludic_core.envs.dataset_qa import DatasetQAEnv, gsm8k_target_parser, numeric_verifier
from ludic_core.envs.single_agent import SingleAgentEnv
from ludic_core.envs.tic_tac_toe import (
    TicTacToeDuelEnv,
    TicTacToeEnv,
    scripted_tic_tac_toe_policy,
    tic_tac_toe_metrics,
)

__all__ = [
    "LudicEnv",
    "EnvError",
    "PolicyResolver",
    "SingleAgentEnv",
    "TicTacToeEnv",
    "TicTacToeDuelEnv",
    "scripted_tic_tac_toe_policy",
    "tic_tac_toe_metrics",
    "DatasetQAEnv",
    "numeric_verifier",
    "gsm8k_target_parser",
    "ArithmeticEnv",
    "generate_arithmetic_problems",
]
