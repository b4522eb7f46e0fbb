"""Rollout requests, strategies and the concurrent engine.

Exports are resolved lazily (`ludic_core.lazy`): an algorithm holds its request
strategy, and its config loads without the engine and the agents and clients
the engine imports.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludic_core.rollout.engine import RolloutEngine
    from ludic_core.rollout.jsonl import append_rollouts, read_rollouts
    from ludic_core.rollout.requests import EnvConfig, EnvSpec, ProtocolSpec, RolloutRequest
    from ludic_core.rollout.strategies import GRPORequestStrategy, IdentityStrategy, RequestStrategy, StatefulStrategy

__all__ = [
    "EnvConfig",
    "EnvSpec",
    "GRPORequestStrategy",
    "IdentityStrategy",
    "ProtocolSpec",
    "RequestStrategy",
    "RolloutEngine",
    "RolloutRequest",
    "StatefulStrategy",
    "append_rollouts",
    "read_rollouts",
]

_SOURCE = {
    "RolloutEngine": "engine",
    "append_rollouts": "jsonl",
    "read_rollouts": "jsonl",
    "EnvConfig": "requests",
    "EnvSpec": "requests",
    "ProtocolSpec": "requests",
    "RolloutRequest": "requests",
    "GRPORequestStrategy": "strategies",
    "IdentityStrategy": "strategies",
    "RequestStrategy": "strategies",
    "StatefulStrategy": "strategies",
}

__getattr__, __dir__ = lazy_exports(__name__, _SOURCE)
