"""Rollout requests, strategies and the concurrent engine."""

from ludic_core.rollout.engine import RolloutEngine
from ludic_core.rollout.jsonl import append_rollouts, read_rollouts
from ludic_core.rollout.requests import EnvSpec, ProtocolSpec, RolloutRequest
from ludic_core.rollout.strategies import GRPORequestStrategy, IdentityStrategy, RequestStrategy

__all__ = [
    "EnvSpec",
    "GRPORequestStrategy",
    "IdentityStrategy",
    "ProtocolSpec",
    "RequestStrategy",
    "RolloutEngine",
    "RolloutRequest",
    "append_rollouts",
    "read_rollouts",
]
