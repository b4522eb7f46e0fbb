"""`RolloutEngine`: run many episodes concurrently from pure-data requests.

Envs and protocols are built per episode from factories (a protocol owns its
agents, and agents hold per-episode dialog state). An env's name is looked up
among the factories given in code (`env_registry`), else resolved by the one
registry every config uses (`ludic_core.registry`: a bundled name, an entry
point in `ludic.envs`, or `pkg.module:Factory`, kind-checked before it is
called). Protocols are given in code only: a protocol holds agents over a live
client, which no JSON name can carry. Episodes
run as asyncio tasks under a concurrency limit, so their model calls meet in
the inference client at the same time and get batched there.

Failure policy: a request naming an unknown kind fails before anything runs;
an episode that raises is recorded as a failed rollout (with whatever steps its
protocol kept) and the rest of the batch goes on. Except when the inference
server is gone (`InferenceServerError`): that fails the whole call, because
every episode would fail alike and a batch trained on the survivors would be
silently skewed; a pipeline retries the stage once the server is back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ludic_core.envs.base import LudicEnv
from ludic_core.inference.errors import InferenceServerError
from ludic_core.interaction.base import InteractionProtocol
from ludic_core.registry import ComponentError, resolve
from ludic_core.rollout.jsonl import append_rollouts
from ludic_core.rollout.requests import RolloutRequest
from ludic_core.rollout.strategies import IdentityStrategy, RequestStrategy
from ludic_core.types import Rollout

__all__ = ["RolloutEngine"]

log = logging.getLogger(__name__)

EnvFactory = Callable[..., LudicEnv]
ProtocolFactory = Callable[..., InteractionProtocol]


class RolloutEngine:
    def __init__(
        self,
        env_registry: Mapping[str, EnvFactory] | None = None,
        protocol_registry: Mapping[str, ProtocolFactory] | None = None,
        *,
        jsonl_path: str | Path | None = None,
        max_concurrency: int = 256,
    ) -> None:
        # 256 episodes at once: a whole GRPO step (e.g. 16 prompts x 8) meets in one decode batch
        if max_concurrency < 1:
            raise ValueError(f"max_concurrency must be >= 1, got {max_concurrency}")
        self.env_registry = dict(env_registry or {})
        self.protocol_registry = dict(protocol_registry or {})
        self._resolved: dict[str, EnvFactory] = {}  # names the registry resolved, kept for later episodes
        self.jsonl_path = Path(jsonl_path) if jsonl_path else None
        self.max_concurrency = max_concurrency
        self.stats: dict[str, Any] = {}

    def validate(self, requests: Sequence[RolloutRequest]) -> None:
        """Fail fast, naming the bad request, before any episode starts."""
        for i, req in enumerate(requests):
            try:
                self._env_factory(req.env.name)
            except ComponentError as exc:
                raise ComponentError(f"request {i}: {exc}; given in code: {sorted(self.env_registry)}") from exc
            if req.protocol.kind not in self.protocol_registry:
                raise ValueError(
                    f"request {i}: unknown protocol kind {req.protocol.kind!r}; "
                    f"registered: {sorted(self.protocol_registry)}"
                )

    def _env_factory(self, name: str) -> EnvFactory:
        """The factory given in code as `name`, else the one the registry resolves it to,
        kept for later episodes (resolving scans the installed entry points)."""
        factory = self.env_registry.get(name) or self._resolved.get(name)
        if factory is None:
            factory = self._resolved[name] = resolve("env", name)
        return factory

    async def generate_rollouts(
        self,
        requests: Sequence[RolloutRequest],
        *,
        max_steps: int,
        strategy: RequestStrategy | None = None,
    ) -> list[Rollout]:
        """Run every episode the (expanded) requests ask for; return all rollouts
        in request order (one per agent per episode)."""
        expanded = (strategy or IdentityStrategy()).expand(requests)
        self.validate(expanded)
        episodes = [
            (i, req, k) for i, req in enumerate(expanded) for k in range(req.num_episodes)
        ]
        sem = asyncio.Semaphore(self.max_concurrency)
        start = time.perf_counter()

        async def run_one(index: int, req: RolloutRequest, k: int) -> list[Rollout]:
            async with sem:
                rollouts = await self._episode(index, req, k, max_steps)
            if self.jsonl_path is not None:
                append_rollouts(self.jsonl_path, rollouts)
            return rollouts

        results = await asyncio.gather(*[run_one(*e) for e in episodes])
        out = [r for rs in results for r in rs]
        failed = sum(r.failed for r in out)
        self.stats = {
            "episodes": len(episodes),
            "rollouts": len(out),
            "failed": failed,
            "seconds": time.perf_counter() - start,
        }
        if failed:
            log.warning("%d of %d rollouts failed (kept, marked failed)", failed, len(out))
        return out

    async def _episode(self, index: int, req: RolloutRequest, k: int, max_steps: int) -> list[Rollout]:
        env_seed = None if req.env_seed is None else req.env_seed + k
        sampling_seed = None if req.sampling_seed is None else req.sampling_seed + k
        meta = {
            **req.meta,
            "env_kind": req.env.name,
            "protocol_kind": req.protocol.kind,
            "request_index": index,
            "group_id": req.group_id,
            # the trainer scales logits by it so ratios compare like with like
            "sampling_temperature": req.inference.sampling.temperature if req.inference else None,
        }
        try:
            env = self._env_factory(req.env.name)(**req.env.kwargs)
            protocol = self.protocol_registry[req.protocol.kind](**req.protocol.kwargs)
            rollouts = await protocol.run(
                env, max_steps=max_steps, env_seed=env_seed,
                sampling_seed=sampling_seed, inference=req.inference,
            )
        except InferenceServerError:
            raise  # the server is gone: training on the episodes that finished would skew the batch
        except Exception as exc:  # noqa: BLE001 - recorded as a failed episode
            log.warning("episode %d of request %d failed: %r", k, index, exc)
            failed = Rollout(meta={**meta, "env_seed": env_seed, "sampling_seed": sampling_seed,
                                   "failed": True, "error": f"{type(exc).__name__}: {exc}"})
            return [failed]
        for r in rollouts:
            r.meta.update(meta)
            versions = {s.trace.policy_version for s in r.steps if s.trace is not None}
            r.meta["policy_versions"] = sorted(v for v in versions if v is not None)
        return rollouts
