"""Inference errors that callers handle differently from a crash."""

from __future__ import annotations

__all__ = ["ContextLengthError", "InferenceServerError", "UnknownServedModelError"]


class ContextLengthError(ValueError):
    """The prompt does not fit the model's context window.

    Protocols end such an episode as *truncated* (like running out of steps),
    not as failed: nothing is wrong with the env or the server.
    """


class InferenceServerError(RuntimeError):
    """The inference backend is unreachable or answered with an error."""


class UnknownServedModelError(ValueError):
    """A request named a model (or adapter) that the server does not serve.

    A server answers such a request with a bare 404; the error names the
    model asked for and what is served, so a typo, or an adapter already
    unloaded (older than the publisher's `keep_last`), is plain to see.
    `LocalChatClient` raises a subclass for the same mistake.
    """

    def __init__(self, message: str, *, model: str | None = None, served: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.model, self.served = model, tuple(served)
