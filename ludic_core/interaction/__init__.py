"""Interaction protocols: how agents and envs take turns."""

from ludic_core.interaction.base import InteractionProtocol, step_seed
from ludic_core.interaction.collector import TraceCollector
from ludic_core.interaction.multi_agent import MultiAgentProtocol
from ludic_core.interaction.single_agent import SingleAgentSyncProtocol

__all__ = [
    "InteractionProtocol",
    "MultiAgentProtocol",
    "SingleAgentSyncProtocol",
    "TraceCollector",
    "step_seed",
]
