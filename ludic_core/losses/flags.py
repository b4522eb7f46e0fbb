"""The flags a loss declares, read in one place with their defaults (torch-free).

`Loss` (losses/base.py) requires `needs_entropy` and `needs_actor_logprobs`
(`declared` refuses a loss that leaves one out: guessing False for a ratio loss
would silently compare its log-probs against zeros). Four flags are optional,
and undeclared means False (or None): `inert_at_zero_advantage` (`is_inert`),
`needs_reference_logprobs` (`wants_reference`), `needs_teacher_logprobs` (`wants_teacher`)
and `teacher_top_k` (`teacher_top_k`). They are plain attributes, not
methods, so a user's loss stays a dataclass with a `__call__`; reading them
here, not at each use, keeps one default for each.
"""

from __future__ import annotations

__all__ = ["declared", "is_inert", "wants_reference", "wants_teacher", "teacher_top_k"]


def declared(loss: object, flag: str) -> bool:
    """`loss.<flag>` (`needs_entropy` or `needs_actor_logprobs`), or a ValueError
    naming the loss: guessing False for a ratio loss would silently compare its
    log-probs against zeros."""
    value = getattr(loss, flag, None)
    if not isinstance(value, bool):
        raise ValueError(f"loss {type(loss).__name__} must declare `{flag}: bool` "
                         f"(see ludic_core.losses.base.Loss), got {value!r}")
    return value


def is_inert(loss: object) -> bool:
    """Whether `loss` declares `inert_at_zero_advantage = True` (see `Loss`);
    anything else, a missing attribute included, reads as not inert."""
    return getattr(loss, "inert_at_zero_advantage", False) is True


def wants_reference(loss: object) -> bool:
    """Whether `loss` declares `needs_reference_logprobs = True` (see `Loss`); undeclared
    reads as False: the loss then gets no `ref_logprobs`."""
    return bool(getattr(loss, "needs_reference_logprobs", False))


def wants_teacher(loss: object) -> bool:
    """Whether `loss` declares `needs_teacher_logprobs = True` (on-policy distillation); undeclared
    reads as False: the loss then gets no `teacher_logprobs`."""
    return bool(getattr(loss, "needs_teacher_logprobs", False))


def teacher_top_k(loss: object) -> int | None:
    """The k of a loss that reads the teacher's k likeliest tokens at each position and the student's
    log-probs of the same tokens (`teacher_top_k: int`, full-distribution distillation); None when
    undeclared: the loss then gets neither."""
    k = getattr(loss, "teacher_top_k", None)
    if k is None:
        return None
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"loss {type(loss).__name__} declares teacher_top_k={k!r}: an int >= 1, or None")
    return k
