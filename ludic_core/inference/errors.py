"""Inference errors that callers handle differently from a crash."""

from __future__ import annotations

__all__ = ["ContextLengthError", "InferenceServerError"]


class ContextLengthError(ValueError):
    """The prompt does not fit the model's context window.

    Protocols end such an episode as *truncated* (like running out of steps),
    not as failed: nothing is wrong with the env or the server.
    """


class InferenceServerError(RuntimeError):
    """The inference backend is unreachable or answered with an error."""
