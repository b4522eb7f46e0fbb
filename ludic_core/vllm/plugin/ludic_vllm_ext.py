"""vLLM worker extension: registers the `ludic_gloo` weight-transfer engine.

Loaded by the server through `--worker-extension-cls
ludic_vllm_ext.LudicWorkerExtension`; importing this module registers
`GlooWeightTransferEngine` with vLLM's own `WeightTransferEngineFactory`, and
`--weight-transfer-config '{"backend": "ludic_gloo"}'` selects it. vLLM's
native RL routes (/init_weight_transfer_engine, /start_weight_update,
/update_weights, /finish_weight_update) then drive it exactly as they drive the
NCCL engine on GPUs; only the data plane differs (gloo over TCP).

Why the engine stages a whole push before loading it: vLLM's layerwise reload
moves parameters to the meta device when an update starts, so a push that
fails half-way (trainer killed, bad tensor) would leave a model that crashes on
its next request. Here nothing touches the model until every expected tensor
has arrived and matched the served checkpoint's schema; then the layerwise
reload (which also redoes vLLM-CPU's weight packing) runs in one go inside
finish_weight_update. A failed push leaves the old weights serving. The cost
is one extra copy of the weights in host memory during a push.

Self-contained: imports only torch, vLLM and `ludic_gloo_wire` (same folder).
Outside a vLLM environment it imports without registering anything, so ludic's
own import checks can load it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from typing import Any

import torch

try:  # inside the server: this folder is on PYTHONPATH
    import ludic_gloo_wire as wire
except ImportError:  # imported as part of ludic_core
    from ludic_core.vllm.plugin import ludic_gloo_wire as wire

try:
    from vllm.distributed.weight_transfer.base import (
        WeightTransferEngine,
        WeightTransferInitInfo,
        WeightTransferUpdateInfo,
    )
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory
except ImportError:  # not inside vLLM's environment: nothing to register
    WeightTransferEngine = WeightTransferInitInfo = WeightTransferUpdateInfo = object
    WeightTransferEngineFactory = None

__all__ = ["GlooInitInfo", "GlooUpdateInfo", "GlooWeightTransferEngine", "LudicWorkerExtension", "SPIN_ENV",
           "shorten_idle_spin", "spin_window"]

log = logging.getLogger("ludic_vllm_ext")

#: the worker's spin window in seconds after each message (`shorten_idle_spin`), set by ludic's launcher;
#: ludic_core.vllm.plugin.SPIN_ENV (this module runs without ludic_core installed)
SPIN_ENV = "LUDIC_VLLM_SPIN_S"


@dataclass
class GlooInitInfo(WeightTransferInitInfo):
    master_address: str
    master_port: int
    world_size: int
    rank_offset: int = 1
    timeout_s: float = 120.0


@dataclass
class GlooUpdateInfo(WeightTransferUpdateInfo):
    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    buckets: list[list[int]] = field(default_factory=list)


class GlooWeightTransferEngine(WeightTransferEngine):
    """Receives bucketed broadcasts over a standalone gloo group."""

    init_info_cls = GlooInitInfo
    update_info_cls = GlooUpdateInfo

    def __init__(self, config: Any, vllm_config: Any, device: Any, model: Any) -> None:
        super().__init__(config, vllm_config, device, model)
        self._store = self._group = None
        self._staged: dict[str, torch.Tensor] | None = None
        self._schema = wire.read_checkpoint_schema(vllm_config.model_config.model)

    # ---- lifecycle -----------------------------------------------------------
    def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
        self.shutdown()  # a trainer that reconnects (e.g. after a restart) replaces the old group
        pc = self.parallel_config
        rank = init_info.rank_offset + pc.data_parallel_index * pc.world_size + pc.rank
        self._store, self._group = wire.open_group(
            init_info.master_address, init_info.master_port, rank, init_info.world_size, init_info.timeout_s)
        log.info("ludic_gloo: joined the trainer's group as rank %d of %d", rank, init_info.world_size)

    def start_weight_update(self) -> None:
        self._staged = {}

    def receive_weights(self, update_info: GlooUpdateInfo) -> None:
        if self._group is None:
            raise RuntimeError("ludic_gloo: no transfer group; call /init_weight_transfer_engine first")
        if self._staged is None:
            raise RuntimeError("ludic_gloo: update_weights before start_weight_update")
        try:
            metas, buckets = wire.decode_update(update_info.__dict__)
            problems = wire.schema_problems(metas, self._schema, require_all=False)
            problems += [f"{m.name} was already sent in this update" for m in metas if m.name in self._staged]
        except ValueError as exc:
            problems = [str(exc)]
        if not wire.agree(self._group, not problems) or problems:  # the trainer hears the vote, not a timeout
            self._staged = None
            raise ValueError("ludic_gloo: refusing weight update, nothing loaded: "
                             + ("; ".join(problems[:8]) or "another worker refused it"))
        for start, end in buckets:
            part = metas[start:end]
            buf = torch.empty(wire.bucket_nbytes(part), dtype=torch.uint8)
            wire.broadcast(self._group, buf)
            for m, t in zip(part, wire.unpack_bucket(buf, part)):
                self._staged[m.name] = t

    def finish_weight_update(self) -> None:
        staged, self._staged = self._staged, None
        if staged is None:
            raise RuntimeError("ludic_gloo: finish_weight_update without a started update")
        missing = sorted(set(self._schema) - set(staged))
        if missing:
            raise ValueError(f"ludic_gloo: refusing incomplete weight update, missing {missing[:5]} "
                             f"({len(missing)} in all); the previous weights keep serving")
        from vllm.model_executor.model_loader.reload import (
            finalize_layerwise_reload,
            initialize_layerwise_reload,
        )

        initialize_layerwise_reload(self.model)
        self.model.load_weights(weights=iter(staged.items()))
        finalize_layerwise_reload(self.model, self.model_config)

    def abort(self) -> None:
        self._staged = None

    def shutdown(self) -> None:
        self._group = self._store = None


class LudicWorkerExtension:
    """Extra collective_rpc methods (POST /collective_rpc {"method": NAME}).

    Mixed into vLLM's worker class; names carry a `ludic_` prefix so they can
    never shadow a worker attribute.
    """

    def ludic_weight_schema(self) -> dict[str, list]:
        """name -> [dtype, shape] a push must match (from the served checkpoint)."""
        schema = wire.read_checkpoint_schema(self.vllm_config.model_config.model)  # type: ignore[attr-defined]
        return {k: [d, list(s)] for k, (d, s) in schema.items()}

    def ludic_check_update(self, update_info: str) -> list[str]:
        """Dry run: the problems a push with this JSON update_info would hit."""
        try:
            metas, _ = wire.decode_update(json.loads(update_info))
        except (ValueError, TypeError) as exc:
            return [str(exc)]
        schema = wire.read_checkpoint_schema(self.vllm_config.model_config.model)  # type: ignore[attr-defined]
        return wire.schema_problems(metas, schema)

    def ludic_spin_window(self) -> float | None:
        """The worker's spin window in seconds (`shorten_idle_spin`); None where this vLLM has none."""
        return spin_window()

    def ludic_abort_weight_update(self) -> bool:
        """Drop a half-received push (the model was never touched) and clear
        the worker's 'update active' flag, so the next push can start."""
        engine = getattr(self, "weight_transfer_engine", None)
        if isinstance(engine, GlooWeightTransferEngine):
            engine.abort()
        was_active = bool(getattr(self, "_weight_update_active", False))
        self._weight_update_active = False
        return was_active


if WeightTransferEngineFactory is not None and wire.BACKEND not in WeightTransferEngineFactory._registry:
    WeightTransferEngineFactory.register_engine(wire.BACKEND, GlooWeightTransferEngine)


def _spin_init() -> Any:
    try:
        from vllm.distributed.device_communicators.shm_broadcast import SpinCondition
    except ImportError:
        return None
    init = SpinCondition.__init__
    names = init.__code__.co_varnames[:init.__code__.co_argcount]
    if names[-1:] != ("busy_loop_s",) or init.__defaults__ is None or len(init.__defaults__) != 1:
        return None
    return init


def spin_window() -> float | None:
    """The spin window new shared-memory queue readers get; None where this vLLM has none."""
    init = _spin_init()
    return None if init is None else float(init.__defaults__[0])


def shorten_idle_spin(seconds: float | None) -> bool:
    """After each message, vLLM's worker spins (sched_yield) on its shared-memory queue for 1 s
    before it sleeps on a socket: low latency on a GPU host with cores to spare. On a CPU host the
    worker then burns a whole core for a second after the last step of every batch of rollouts,
    the core the trainer beside it needs. `seconds` is the new spin window (None: leave vLLM's).
    Runs on import in the server's worker, before its queues exist (not when ludic_core imports
    this module in the trainer); False where this vLLM has no such window (nothing changed)."""
    if seconds is None:
        return False
    init = _spin_init()
    if init is None:
        log.warning("ludic_vllm_ext: this vLLM has no SpinCondition(busy_loop_s=...); its spin window is left as is")
        return False
    init.__defaults__ = (float(seconds),)
    return True


if __name__ == "ludic_vllm_ext":  # loaded by the server (this folder on its PYTHONPATH), not by ludic_core
    shorten_idle_spin(float(os.environ[SPIN_ENV]) if os.environ.get(SPIN_ENV) else None)
