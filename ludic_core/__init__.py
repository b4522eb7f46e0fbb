"""ludic_core: policy-gradient RL for LLM agents (see docs/library.md).

The names a first program needs, from one place: `from ludic_core import Agent,
RolloutEngine, Trainer, ...`. Each is its package's own export (the subpackages
stay the home of each concept, and name many more), loaded on first use
(`ludic_core.lazy`), so `import ludic_core` stays cheap and imports no torch: a
process that only validates a config pays for nothing else.

Importing sets nothing either. OpenMP's wait policy, which in-process RL wants
before torch loads, is set by the entry points that decode beside a trainer
(the `ludic` CLI and every flow-run process, through `flows`); a program of your
own calls `ludic_core.openmp.configure()` before it imports torch
(`ludic_core/openmp.py` says why).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ludic_core.lazy import lazy_exports

if TYPE_CHECKING:
    from ludic_core.agents import Agent
    from ludic_core.algorithms import make_grpo
    from ludic_core.batching import RolloutBatchSource
    from ludic_core.config import TrainerConfig
    from ludic_core.context import SlidingWindowContext
    from ludic_core.envs import TicTacToeEnv
    from ludic_core.inference import InferenceSpec, LocalChatClient, SamplingConfig
    from ludic_core.interaction import SingleAgentSyncProtocol
    from ludic_core.models import build_tiny_model, load_model_and_tokenizer
    from ludic_core.parsers import xml_tag_parser
    from ludic_core.publish import InProcessPublisher
    from ludic_core.rollout import EnvConfig, EnvSpec, GRPORequestStrategy, ProtocolSpec, RolloutEngine, RolloutRequest
    from ludic_core.training import Trainer

#: each top-level name -> the package that exports it (README's quickstart, docs/training.md's loop)
_SOURCE = {
    # rollouts: an env, an agent on a client, the engine
    "Agent": "agents",
    "SlidingWindowContext": "context",
    "TicTacToeEnv": "envs",
    "InferenceSpec": "inference",
    "LocalChatClient": "inference",
    "SamplingConfig": "inference",
    "SingleAgentSyncProtocol": "interaction",
    "build_tiny_model": "models",
    "load_model_and_tokenizer": "models",
    "xml_tag_parser": "parsers",
    "EnvConfig": "rollout",
    "EnvSpec": "rollout",  # EnvConfig's old name, deprecated: goes in the next release
    "GRPORequestStrategy": "rollout",
    "ProtocolSpec": "rollout",
    "RolloutEngine": "rollout",
    "RolloutRequest": "rollout",
    # training on them
    "make_grpo": "algorithms",
    "RolloutBatchSource": "batching",
    "TrainerConfig": "config",
    "InProcessPublisher": "publish",
    "Trainer": "training",
}

__all__ = sorted(_SOURCE)

__getattr__, __dir__ = lazy_exports(__name__, _SOURCE)
