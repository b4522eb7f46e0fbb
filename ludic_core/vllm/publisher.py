"""`VLLMPolicyPublisher`: live weight pushes through vLLM's native RL API.

One publish is, in this order:
  1. check names / shapes / dtypes against the served checkpoint's schema
     (fetched once from the server): a bad push is refused HERE, before the
     server is paused or a parameter touched;
  2. POST /pause?mode=wait: running requests finish on the old weights, new
     ones queue, so no completion ever mixes two versions;
  3. /start_weight_update, /update_weights (bytes over the transport, in
     buckets), /finish_weight_update {"weight_version": version};
  4. POST /resume, always, also after a failure.
A failure between 3's start and finish is aborted on the server
(`ludic_abort_weight_update`); with the gloo engine the old weights were never
touched, so the server keeps serving the previous version. The error says so.

The version vLLM stores is what `VLLMChatClient` reports on every completion.
One publisher per server: a second concurrent one would interleave pauses.

Constructed with an `adapter_dir`, it also takes a LoRA run's adapter
(`publish_adapter`): written there and loaded into the server under
`policy-v{version}` (`vllm.adapters`), no pause and no weight transfer, the
base untouched. `on_published(version, model=NAME)` then tells the client
which adapter requests should name.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any, Callable, Mapping

import torch

from ludic_core.inference.errors import InferenceServerError
from ludic_core.publish.base import PolicyPublisher
from ludic_core.vllm.adapters import AdapterLoadError, PublishedAdapter, ServerAdapters
from ludic_core.vllm.http import ControlClient, RetryPolicy
from ludic_core.vllm.plugin import ludic_gloo_wire as wire
from ludic_core.vllm.transports import WeightTransport, make_transport

__all__ = ["AdapterLoadError", "VLLMPolicyPublisher", "WeightPushError"]

log = logging.getLogger(__name__)


class WeightPushError(ValueError):
    """A push that does not fit the served model; refused before anything was sent."""


class VLLMPolicyPublisher(PolicyPublisher):
    """`PolicyPublisher` for a running vLLM server (its root URL, without /v1)."""

    def __init__(
        self,
        root_url: str,
        *,
        api_key: str | None = None,
        transport: str | WeightTransport = "auto",
        bucket_mb: int = 64,
        transfer_host: str = "127.0.0.1",
        timeout_s: float = 300.0,
        on_published: Callable[..., None] | None = None,
        adapter_dir: str | Path | None = None,
        keep_adapters: int = 2,
    ) -> None:
        root_url = root_url.rstrip("/")
        if root_url.endswith("/v1"):
            root_url = root_url[:-3]
        self.root_url = root_url
        self.control = ControlClient(root_url, api_key=api_key, timeout_s=timeout_s, retry=RetryPolicy())
        self.transport = (make_transport(transport, host=transfer_host, bucket_bytes=bucket_mb << 20)
                          if isinstance(transport, str) else transport)
        self.on_published = on_published  # (version) after full weights, (version, model=NAME) after an adapter
        self.adapters = (ServerAdapters(self.control, adapter_dir, keep_last=keep_adapters)
                         if adapter_dir is not None else None)
        self.published_version: int | None = None
        self.published_model: str | None = None  # the adapter requests name; None = the base's name
        self.published_adapters: list[PublishedAdapter] = []  # every adapter this publisher loaded
        self.last_push: dict[str, float] = {}
        self._schema: dict[str, tuple[str, tuple[int, ...]]] | None = None

    # ---- setup ------------------------------------------------------------
    def connect(self) -> None:
        """Fetch the schema, clear a push a dead trainer left half-done, join the group."""
        if self._schema is not None:
            return
        results = self.control.post("/collective_rpc", json={"method": "ludic_weight_schema"})["results"]
        schema = {k: (d, tuple(s)) for k, (d, s) in results[0].items()}
        # A push left half-done (a publisher that died, an abort that never
        # arrived) would block every later /start_weight_update: clear it.
        aborted = self.control.post("/collective_rpc", json={"method": "ludic_abort_weight_update"})["results"]
        if left_half_done(aborted):
            log.warning("%s had a half-done weight push (nothing of it was loaded); cleared it", self.root_url)
        if self.control.get("/is_paused").get("is_paused"):
            log.warning("%s was left paused (a previous publisher died mid-push?); resuming it", self.root_url)
            self.control.post("/resume")
        world = int(self.control.get("/get_world_size")["world_size"])
        self.transport.connect(self.control, world)
        self._schema = schema

    def served_version(self) -> str:
        return str(self.control.get("/weight_info")["weight_version"])

    @property
    def accepts_adapters(self) -> bool:
        """True when built with an adapter_dir: a LoRA trainer then sends its adapter, not merged weights."""
        return self.adapters is not None

    # ---- AdapterPublisher -------------------------------------------------
    def publish_adapter(self, tensors: Mapping[str, Any], config: Any, *, version: int) -> None:
        """Load the adapter of `version` as `policy-v{version}`, point the client at it,
        then unload adapters beyond keep_adapters. A refused load (`AdapterLoadError`)
        leaves the server serving what it served."""
        if self.adapters is None:
            raise ValueError(f"this publisher for {self.root_url} was built without adapter_dir: it publishes "
                             "full weights (publish); pass adapter_dir= to publish adapters")
        done = self.adapters.publish({k: _plain(t) for k, t in tensors.items()}, config, version=version)
        self.published_adapters.append(done)
        self.last_push = {"version": float(version), "mb": done.bytes / 1e6, "seconds": done.seconds,
                          "mb_per_s": done.bytes / 1e6 / max(done.seconds, 1e-9)}
        self.published_version, self.published_model = int(version), done.name
        log.info("published adapter %s to %s: %.2f MB in %.3f s", done.name, self.root_url, done.bytes / 1e6,
                 done.seconds)
        if self.on_published is not None:
            self.on_published(int(version), model=done.name)
        gone = self.adapters.evict()  # after the client moved on: no new request names them
        if gone:
            log.info("unloaded adapters %s from %s (keeping the newest %d)", gone, self.root_url,
                     self.adapters.keep_last)

    # ---- PolicyPublisher -------------------------------------------------
    def publish(self, state_dict: Mapping[str, Any], *, version: int) -> None:
        plain = {n: _plain(t) for n, t in state_dict.items()}
        self.connect()
        assert self._schema is not None
        plain = _without_tied_copies(plain, self._schema)
        names, tensors = list(plain), list(plain.values())
        metas = [wire.TensorMeta(n, str(t.dtype).removeprefix("torch."), tuple(t.shape))
                 for n, t in zip(names, tensors)]
        problems = wire.schema_problems(metas, self._schema)
        if problems:
            raise WeightPushError(
                f"refusing to publish version {version} to {self.root_url}: " + "; ".join(problems[:8])
                + f". Nothing was sent; the server keeps version {self.served_version()}")
        t0 = time.perf_counter()
        self._push(metas, tensors, version)
        secs = time.perf_counter() - t0
        mb = sum(m.nbytes for m in metas) / 1e6
        self.last_push = {"version": float(version), "mb": mb, "seconds": secs, "mb_per_s": mb / max(secs, 1e-9)}
        self.published_version, self.published_model = int(version), None
        log.info("published version %d to %s: %.1f MB in %.2f s (%.0f MB/s)", version, self.root_url,
                 mb, secs, mb / max(secs, 1e-9))
        if self.on_published is not None:
            self.on_published(int(version))

    def _push(self, metas: list[wire.TensorMeta], tensors: list[torch.Tensor], version: int) -> None:
        self.connect()  # again after a failed push, which drops the transfer group
        paused = started = False
        try:
            self.control.post("/pause", params={"mode": "wait"})
            paused = True
            self.control.post("/start_weight_update")
            started = True
            self.transport.send(self.control, metas, tensors)
            self.control.post("/finish_weight_update", json={"weight_version": str(int(version))})
            started = False
        except Exception as exc:
            if started:
                self._abort()
            # Only the gloo engine stages a whole push before touching the model;
            # vLLM's NCCL engine reloads layer by layer, so a failed push may leave it half-updated.
            outcome = ("no new weights were loaded" if self.transport.backend == wire.BACKEND else
                       "the served weights may be partly updated: push again or restart the server")
            raise InferenceServerError(f"weight push of version {version} to {self.root_url} failed "
                                       f"({type(exc).__name__}: {exc}); {outcome}") from exc
        finally:
            if paused:
                self._resume()

    def _abort(self) -> None:
        try:
            self.control.post("/collective_rpc", json={"method": "ludic_abort_weight_update"})
        except InferenceServerError as exc:
            log.error("could not abort the failed push on %s: %s", self.root_url, exc)
        self.transport.close()  # the group may be mid-collective: rejoin on the next push
        self._schema = None

    def _resume(self) -> None:
        try:
            self.control.post("/resume")
        except InferenceServerError as exc:
            log.error("could not resume %s after a push: %s", self.root_url, exc)

    def close(self) -> None:
        self.transport.close()
        self.control.close()


def left_half_done(results: list[Any]) -> bool:
    """Whether any worker's `ludic_abort_weight_update` found a push to clear. vLLM's
    /collective_rpc hands a worker's bool back as a string ('False'), which `any()` reads as true:
    every first connect then warned of a half-done push that was not there."""
    return any(r is True or r == "True" for r in results)


def _without_tied_copies(state: dict[str, torch.Tensor],
                         schema: Mapping[str, tuple[str, tuple[int, ...]]]) -> dict[str, torch.Tensor]:
    """Drop entries the served checkpoint does not have because they are tied to one it has.

    With tie_word_embeddings (Qwen2.5, Llama-3.2, Gemma) `state_dict()` lists
    `lm_head.weight` while save_pretrained, hence the served schema, stores only
    the embedding; vLLM ties them itself. An unknown name is dropped only when
    its values equal a same-shaped tensor that is in the schema, so a genuinely
    unknown parameter is still refused by the schema check.
    """
    known = [t for n, t in state.items() if n in schema]
    out = {}
    for name, t in state.items():
        if name not in schema and any(k.shape == t.shape and k.dtype == t.dtype and torch.equal(k, t)
                                      for k in known):
            log.debug("not pushing %s: a tied copy of a served parameter", name)
            continue
        out[name] = t
    return out


def _plain(t: Any) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"state_dict values must be tensors, got {type(t).__name__}")
    full = getattr(t, "full_tensor", None)  # an FSDP DTensor: gather it
    return (full() if callable(full) else t).detach()
