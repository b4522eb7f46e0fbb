"""Thin helpers over torch.distributed + FSDP2 that degrade to no-ops in one process.

The trainer is written once and runs either as a plain process (tests, laptops,
one GPU) or under `torchrun` (several GPUs, or several CPU processes on gloo).
Everything here therefore takes a `DistContext` and does the single-process thing
when `ctx.is_distributed` is false, so callers need no `if` of their own.

Gradients are AVERAGED over ranks, as with FSDP2's and DDP's defaults: a trainer
that normalises each rank's loss by the GLOBAL token count multiplies it by
`world_size` so that the averaged gradient is exactly the single-process
full-batch gradient.

No pickle anywhere: objects cross ranks as JSON inside byte tensors.
"""

from __future__ import annotations

import gc
import json
import os
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.distributed as dist
from torch import nn

from ludic_core.device import resolve_device

__all__ = [
    "DistContext",
    "all_gather_json",
    "all_reduce_sum",
    "all_reduce_floats",
    "all_reduce_tensor",
    "barrier",
    "broadcast_object_json",
    "check_ranks_fit_gpus",
    "cleanup",
    "full_state_dict",
    "init_distributed",
    "is_sharded",
    "set_gradient_sync",
    "shard_batch",
    "shard_model",
]


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the job: rank, world size and compute device."""

    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        """Rank 0: the one process that writes files and logs."""
        return self.rank == 0

    @property
    def is_distributed(self) -> bool:
        """True when a process group with more than one rank is active."""
        return self.world_size > 1


# The process group we created (so `cleanup` never destroys someone else's) and
# the context handed out, which makes `init_distributed` idempotent.
_CREATED_GROUP = False
_CONTEXT: DistContext | None = None


def init_distributed(device: str = "auto") -> DistContext:
    """Join the torchrun job when `WORLD_SIZE` > 1, else return a one-process context.

    `device` is a `ludic_core.device` spec. Under torchrun every rank binds to
    its local GPU (`cuda:LOCAL_RANK`, NCCL); with `device: cpu`, or no GPU, the
    ranks run on the CPU over gloo, so CPU-only machines never touch NCCL.
    Calling it again under torchrun returns the same context.
    """
    global _CREATED_GROUP, _CONTEXT
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return DistContext(rank=0, world_size=1, local_rank=0, device=resolve_device(device))
    if _CONTEXT is not None:
        return _CONTEXT
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    dev = _rank_device(device, local_rank, int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))
    if not dist.is_initialized():
        dist.init_process_group(backend="nccl" if dev.type == "cuda" else "gloo")
        _CREATED_GROUP = True
    _CONTEXT = DistContext(rank=dist.get_rank(), world_size=dist.get_world_size(), local_rank=local_rank, device=dev)
    return _CONTEXT


def check_ranks_fit_gpus(ranks: int, gpus: int) -> None:
    """One GPU per rank (NCCL cannot put two ranks on one GPU): a clear error naming both numbers."""
    if ranks > gpus:
        raise ValueError(f"torchrun started {ranks} ranks on this machine but {gpus} GPU(s) are visible: "
                         f"use --nproc_per_node <= {gpus}, or device: cpu to train on CPU ranks over gloo")


def _rank_device(spec: str, local_rank: int, local_world: int) -> torch.device:
    """This rank's device: its local GPU, or the CPU (see `init_distributed`)."""
    if spec.startswith("cuda:"):
        raise ValueError(f"device {spec!r} names one GPU, but under torchrun each rank uses its local GPU "
                         "(cuda:LOCAL_RANK): set device to cuda or auto")
    if resolve_device(spec).type == "cpu":
        return torch.device("cpu")
    check_ranks_fit_gpus(local_world, torch.cuda.device_count())
    torch.cuda.set_device(local_rank)
    return torch.device("cuda", local_rank)


def cleanup(ctx: DistContext) -> None:
    """Destroy the process group if `init_distributed` created it (call once, at the end).

    The barrier first is a gloo workaround: once DTensor/FSDP2 has touched the group,
    `destroy_process_group` no longer joins gloo's worker threads (torch 2.13), and a
    worker that frees its last collective's tensors while the interpreter is already
    finalizing aborts the process ("terminate called without an active exception").
    The barrier gives those threads time to finish that work first.
    """
    global _CREATED_GROUP, _CONTEXT
    if _CREATED_GROUP and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
        gc.collect()
    _CREATED_GROUP = False
    _CONTEXT = None


def is_sharded(model: nn.Module) -> bool:
    """Whether `model` has been through FSDP2's `fully_shard`."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def _decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The transformer blocks of an HF causal LM (`model.model.layers`), or []."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    return list(layers) if isinstance(layers, nn.ModuleList) else []


def shard_model(model: nn.Module, ctx: DistContext, *, mixed_precision: bool = False) -> nn.Module:
    """FSDP2-shard each decoder layer, then the root; a no-op in one process.

    Per-layer units keep peak memory at one unsharded layer. `mixed_precision`
    computes in bf16 while keeping fp32 master weights and fp32 gradient reduction.
    Gradients are averaged across ranks (see the module docstring).
    """
    if not ctx.is_distributed:
        return model
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    # An explicit mesh on the ranks' own device type: FSDP2's default mesh is CUDA whenever
    # torch sees a GPU, so gloo CPU ranks on a 1-GPU machine asked for cuda:1 and crashed.
    kwargs: dict[str, Any] = {"mesh": init_device_mesh(ctx.device.type, (ctx.world_size,))}
    if mixed_precision:
        kwargs["mp_policy"] = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    if ctx.device.type == "cuda":
        model.to(ctx.device)
    units = [*_decoder_layers(model), model]
    for unit in units:
        fully_shard(unit, **kwargs)
    for unit in units:
        # Average as SUM + divide: FSDP2 would use ReduceOp.AVG, which gloo lacks.
        unit.set_force_sum_reduction_for_comms(True)  # type: ignore[operator]
    return model


def set_gradient_sync(model: nn.Module, enabled: bool) -> None:
    """Turn gradient reduction on (last micro-batch) or off (accumulating); no-op unsharded."""
    if is_sharded(model):
        model.set_requires_gradient_sync(enabled)  # type: ignore[operator]


def _comm_device(ctx: DistContext) -> torch.device:
    """NCCL only moves CUDA tensors; gloo only CPU ones."""
    return ctx.device if ctx.device.type == "cuda" else torch.device("cpu")


def all_reduce_sum(x: float, ctx: DistContext) -> float:
    """Sum a Python number over ranks (e.g. the global token count)."""
    if not ctx.is_distributed:
        return x
    t = torch.tensor([x], dtype=torch.float64, device=_comm_device(ctx))
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    return float(t.item())


def all_reduce_floats(xs: list[float], op: str, ctx: DistContext) -> list[float]:
    """Reduce a list of numbers elementwise over ranks in one call (op: sum, max, min);
    every rank must pass the same length."""
    if not ctx.is_distributed or not xs:
        return list(xs)
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    t = torch.tensor(xs, dtype=torch.float64, device=_comm_device(ctx))
    dist.all_reduce(t, op=ops[op])
    return [float(v) for v in t.tolist()]


def all_reduce_tensor(t: torch.Tensor, op: str, ctx: DistContext) -> torch.Tensor:
    """`all_reduce_floats` for numbers still on the device: reduce `t` elementwise over
    ranks in one call (op: sum, max, min) without reading it on the host. Returns a new
    tensor on the communication device (`t` itself in one process)."""
    if not ctx.is_distributed or t.numel() == 0:
        return t
    ops = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}
    out = t.to(_comm_device(ctx), copy=True)
    dist.all_reduce(out, op=ops[op])
    return out


def barrier(ctx: DistContext) -> None:
    """Wait for every rank; a no-op in one process."""
    if ctx.is_distributed:
        dist.barrier()


def _json_bytes(obj: Any) -> torch.Tensor:
    data = json.dumps(obj, allow_nan=True).encode("utf-8")
    return torch.frombuffer(bytearray(data), dtype=torch.uint8) if data else torch.empty(0, dtype=torch.uint8)


def _from_json_bytes(t: torch.Tensor) -> Any:
    return json.loads(bytes(t.cpu().tolist()).decode("utf-8"))


def broadcast_object_json(obj: Any, ctx: DistContext) -> Any:
    """Rank 0's JSON-able `obj` on every rank (length first, then the bytes)."""
    if not ctx.is_distributed:
        return obj
    dev = _comm_device(ctx)
    payload = _json_bytes(obj).to(dev) if ctx.is_main else None
    size = torch.tensor([payload.numel() if payload is not None else 0], dtype=torch.int64, device=dev)
    dist.broadcast(size, src=0)
    if payload is None:
        payload = torch.empty(int(size.item()), dtype=torch.uint8, device=dev)
    dist.broadcast(payload, src=0)
    return _from_json_bytes(payload)


def all_gather_json(obj: Any, ctx: DistContext) -> list[Any]:
    """Every rank's JSON-able `obj`, in rank order, on every rank (e.g. RNG states)."""
    if not ctx.is_distributed:
        return [obj]
    dev = _comm_device(ctx)
    mine = _json_bytes(obj).to(dev)
    sizes = [torch.zeros(1, dtype=torch.int64, device=dev) for _ in range(ctx.world_size)]
    dist.all_gather(sizes, torch.tensor([mine.numel()], dtype=torch.int64, device=dev))
    longest = max(int(s.item()) for s in sizes)
    padded = torch.zeros(longest, dtype=torch.uint8, device=dev)
    padded[: mine.numel()] = mine
    parts = [torch.empty(longest, dtype=torch.uint8, device=dev) for _ in range(ctx.world_size)]
    dist.all_gather(parts, padded)
    return [_from_json_bytes(p[: int(s.item())]) for p, s in zip(parts, sizes)]


def full_state_dict(model: nn.Module, ctx: DistContext) -> dict[str, torch.Tensor]:
    """The full, unsharded CPU state dict on rank 0 (other ranks get {}); all ranks call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    if not ctx.is_distributed:
        return {k: v.detach().to("cpu", copy=True) for k, v in model.state_dict().items()}
    full = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return cast("dict[str, torch.Tensor]", full)  # a model's state dict holds tensors only


def shard_batch(items: list, ctx: DistContext) -> list:
    """This rank's contiguous slice; the first `len % world` ranks get one extra item."""
    per, extra = divmod(len(items), ctx.world_size)
    start = ctx.rank * per + min(ctx.rank, extra)
    return items[start : start + per + (1 if ctx.rank < extra else 0)]
