"""Request strategies: expand requests before the engine runs them."""

from __future__ import annotations

import random
import uuid
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

from ludic_core.rollout.requests import RolloutRequest

__all__ = ["RequestStrategy", "StatefulStrategy", "IdentityStrategy", "GRPORequestStrategy"]


class RequestStrategy(Protocol):
    def expand(self, requests: Sequence[RolloutRequest]) -> list[RolloutRequest]: ...


@runtime_checkable
class StatefulStrategy(RequestStrategy, Protocol):
    """A strategy whose draws depend on what it drew before: a batch source checkpoints its state."""

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: Mapping[str, Any]) -> None: ...


class IdentityStrategy:
    """Runs requests as given."""

    def expand(self, requests: Sequence[RolloutRequest]) -> list[RolloutRequest]:
        return list(requests)


class GRPORequestStrategy:
    """G episodes per request: same env seed (same problem / start state),
    distinct sampling seeds, one shared `group_id`, so group-relative credit
    compares answers to the same question. Its generator's state is part of a
    checkpoint (`state_dict`), so a resumed run draws the group ids (and any seeds
    the requests leave open) an uninterrupted one would have: ids stay unique
    across a run's rollout log."""

    def __init__(self, group_size: int, *, seed: int | None = None) -> None:
        if group_size < 1:
            raise ValueError(f"group_size must be >= 1, got {group_size}")
        self.group_size = group_size
        self._rng = random.Random(seed)

    def expand(self, requests: Sequence[RolloutRequest]) -> list[RolloutRequest]:
        out: list[RolloutRequest] = []
        for req in requests:
            for _ in range(req.num_episodes):
                env_seed = req.env_seed if req.env_seed is not None else self._rng.randrange(1 << 31)
                base = req.sampling_seed if req.sampling_seed is not None else self._rng.randrange(1 << 31)
                group_id = uuid.UUID(int=self._rng.getrandbits(128)).hex
                for i in range(self.group_size):
                    out.append(req.model_copy(update={
                        "num_episodes": 1,
                        "env_seed": env_seed,
                        "sampling_seed": base + i,
                        "group_id": group_id,
                    }))
        return out

    def state_dict(self) -> dict[str, Any]:
        """The generator's state, JSON-able (a checkpoint's `trainer_state.json` holds it)."""
        version, internal, gauss = self._rng.getstate()
        return {"rng": [version, list(internal), gauss]}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        try:
            version, internal, gauss = state["rng"]
            self._rng.setstate((int(version), tuple(int(v) for v in internal), gauss))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a GRPORequestStrategy state (want {{'rng': [version, [625 ints], gauss]}}): "
                             f"{exc}") from exc
