"""Context strategies: how an agent's dialog is stored and shown to the model."""

from ludic_core.context.base import ContextStrategy
from ludic_core.context.full_dialog import FullDialog
from ludic_core.context.sliding_window import SlidingWindowContext
from ludic_core.context.truncated_thinking import TruncatedThinkingContext, truncate_thinking

__all__ = [
    "ContextStrategy",
    "FullDialog",
    "SlidingWindowContext",
    "TruncatedThinkingContext",
    "truncate_thinking",
]
