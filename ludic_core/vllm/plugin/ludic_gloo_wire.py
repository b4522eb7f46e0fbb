"""Wire format of the gloo weight push, shared by the trainer and the vLLM worker.

Self-contained on purpose (torch + standard library): the vLLM server imports
it from its own virtual environment as the top-level module `ludic_gloo_wire`.

A push is described by JSON metadata that travels over HTTP (vLLM's
/update_weights body): parameter names, dtypes, shapes and bucket boundaries.
The bytes travel over a gloo process group, one flat uint8 broadcast per
bucket, so a push of N parameters costs a handful of collectives, not N.
Before the first bucket every rank votes (`agree`, an all-reduce MIN): a
worker that refuses the metadata says so at once instead of leaving the
trainer blocked in a broadcast until the group's timeout. Nothing is pickled.

Both sides check the metadata against the served checkpoint's *schema* (names,
shapes, dtypes read from its safetensors headers) before a single parameter is
touched, so a wrong shape or a missing parameter is refused up front.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

__all__ = [
    "BACKEND",
    "ALIGN",
    "TensorMeta",
    "plan_buckets",
    "encode_update",
    "decode_update",
    "pack_bucket",
    "unpack_bucket",
    "bucket_nbytes",
    "read_checkpoint_schema",
    "schema_problems",
    "open_group",
    "broadcast",
    "agree",
]

BACKEND = "ludic_gloo"
ALIGN = 64  # every tensor starts at a multiple of this inside a bucket (view() needs alignment)
_FLOAT_DTYPES = {"float32", "float16", "bfloat16", "float64"}
_SAFETENSORS_DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16",
                       "I64": "int64", "I32": "int32", "I16": "int16", "I8": "int8", "U8": "uint8",
                       "BOOL": "bool"}


@dataclass(frozen=True)
class TensorMeta:
    name: str
    dtype: str  # torch dtype name without the "torch." prefix, e.g. "float32"
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        n = torch.empty((), dtype=getattr(torch, self.dtype)).element_size()
        for d in self.shape:
            n *= d
        return n


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_buckets(sizes: Sequence[int], bucket_bytes: int) -> list[list[int]]:
    """Split consecutive tensors into [start, end) index ranges of at most
    `bucket_bytes` (aligned) each; a tensor larger than that gets its own."""
    if bucket_bytes < 1:
        raise ValueError(f"bucket_bytes must be >= 1, got {bucket_bytes}")
    buckets, start, used = [], 0, 0
    for i, size in enumerate(sizes):
        need = _aligned(size)
        if i > start and used + need > bucket_bytes:
            buckets.append([start, i])
            start, used = i, 0
        used += need
    if start < len(sizes):
        buckets.append([start, len(sizes)])
    return buckets


def encode_update(metas: Sequence[TensorMeta], bucket_bytes: int) -> dict[str, Any]:
    """The JSON-able update_info of one push."""
    return {
        "names": [m.name for m in metas],
        "dtype_names": [m.dtype for m in metas],
        "shapes": [list(m.shape) for m in metas],
        "buckets": plan_buckets([m.nbytes for m in metas], bucket_bytes),
    }


def decode_update(info: dict[str, Any]) -> tuple[list[TensorMeta], list[list[int]]]:
    """Parse and sanity-check an update_info dict; raise ValueError naming the problem."""
    names, dtypes, shapes = info.get("names"), info.get("dtype_names"), info.get("shapes")
    buckets = info.get("buckets")
    if not isinstance(names, list) or not isinstance(dtypes, list) or not isinstance(shapes, list):
        raise ValueError("update_info needs lists 'names', 'dtype_names' and 'shapes'")
    if not (len(names) == len(dtypes) == len(shapes)):
        raise ValueError(f"update_info lists differ in length: {len(names)} names, "
                         f"{len(dtypes)} dtype_names, {len(shapes)} shapes")
    if len(set(names)) != len(names):
        raise ValueError("update_info names a parameter twice")
    metas = []
    for n, d, s in zip(names, dtypes, shapes):
        if d not in _FLOAT_DTYPES:
            raise ValueError(f"{n}: dtype {d!r} is not a floating dtype ({sorted(_FLOAT_DTYPES)})")
        if not isinstance(s, list) or not all(isinstance(x, int) and x >= 0 for x in s):
            raise ValueError(f"{n}: shape {s!r} is not a list of non-negative ints")
        metas.append(TensorMeta(str(n), d, tuple(s)))
    if not isinstance(buckets, list) or not buckets and metas:
        raise ValueError("update_info needs a non-empty 'buckets' list")
    pos = 0
    for b in buckets:
        if not (isinstance(b, list) and len(b) == 2 and b[0] == pos and b[1] > b[0]):
            raise ValueError(f"bucket {b!r} does not continue at index {pos}")
        pos = b[1]
    if pos != len(metas):
        raise ValueError(f"buckets cover {pos} of {len(metas)} tensors")
    return metas, buckets


def _layout(metas: Sequence[TensorMeta]) -> tuple[list[int], int]:
    offsets, off = [], 0
    for m in metas:
        offsets.append(off)
        off += _aligned(m.nbytes)
    return offsets, off


def pack_bucket(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """One flat, aligned uint8 CPU buffer holding the tensors. A bucket of one
    contiguous CPU tensor of aligned size is sent as is (no copy)."""
    metas = [TensorMeta("", str(t.dtype).removeprefix("torch."), tuple(t.shape)) for t in tensors]
    offsets, total = _layout(metas)
    if len(tensors) == 1 and total == metas[0].nbytes and tensors[0].device.type == "cpu" \
            and tensors[0].is_contiguous():
        return tensors[0].detach().reshape(-1).view(torch.uint8)
    buf = torch.empty(total, dtype=torch.uint8)
    for t, off, m in zip(tensors, offsets, metas):
        src = t.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
        buf[off:off + m.nbytes].copy_(src)
    return buf


def bucket_nbytes(metas: Sequence[TensorMeta]) -> int:
    return _layout(metas)[1]


def unpack_bucket(buf: torch.Tensor, metas: Sequence[TensorMeta]) -> list[torch.Tensor]:
    """Views (no copy) of each tensor inside a received bucket."""
    offsets, total = _layout(metas)
    if buf.numel() != total:
        raise ValueError(f"bucket has {buf.numel()} bytes, metadata says {total}")
    return [buf[off:off + m.nbytes].view(getattr(torch, m.dtype)).view(m.shape)
            for off, m in zip(offsets, metas)]


def read_checkpoint_schema(model_dir: str | Path) -> dict[str, tuple[str, tuple[int, ...]]]:
    """name -> (dtype, shape) of every tensor in a safetensors checkpoint,
    read from the file headers only (no tensor data is loaded)."""
    root = Path(model_dir)
    index = root / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in root.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no safetensors checkpoint in {root}")
    schema: dict[str, tuple[str, tuple[int, ...]]] = {}
    for fname in files:
        with open(root / fname, "rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(n))
        for name, entry in header.items():
            if name != "__metadata__":
                schema[name] = (_SAFETENSORS_DTYPES.get(entry["dtype"], entry["dtype"]), tuple(entry["shape"]))
    return schema


def schema_problems(metas: Iterable[TensorMeta], schema: dict[str, tuple[str, tuple[int, ...]]],
                    *, require_all: bool = True) -> list[str]:
    """Why a push does not fit the served model (empty when it does).

    Names must exist and shapes match exactly; dtypes may differ between
    floating types (the server casts, e.g. an fp32 trainer into bf16 serving).
    """
    problems, seen = [], set()
    for m in metas:
        seen.add(m.name)
        if m.name not in schema:
            problems.append(f"unknown parameter {m.name!r}")
            continue
        dtype, shape = schema[m.name]
        if tuple(m.shape) != tuple(shape):
            problems.append(f"{m.name}: shape {list(m.shape)} != served {list(shape)}")
        elif dtype in _FLOAT_DTYPES and m.dtype not in _FLOAT_DTYPES:
            problems.append(f"{m.name}: dtype {m.dtype} cannot load into {dtype}")
    if require_all:
        missing = sorted(set(schema) - seen)
        if missing:
            more = f" (+{len(missing) - 5} more)" if len(missing) > 5 else ""
            problems.append(f"missing parameters {missing[:5]}{more}")
    return problems


def open_group(host: str, port: int, rank: int, world_size: int, timeout_s: float,
               store: Any = None) -> tuple[Any, Any]:
    """A standalone gloo group (not torch.distributed's default group, which
    vLLM or FSDP may own). Rank 0 passes the TCPStore it serves; the others
    connect to host:port. Returns (store, group)."""
    from torch.distributed import TCPStore
    from torch.distributed.distributed_c10d import ProcessGroupGloo

    timeout = timedelta(seconds=timeout_s)
    if store is None:
        store = TCPStore(host, port, world_size, is_master=False, timeout=timeout)
    opts = ProcessGroupGloo._Options()
    opts._timeout = timeout
    opts._devices = [ProcessGroupGloo.create_device(hostname=host)]
    return store, ProcessGroupGloo(store, rank, world_size, opts)


def broadcast(group: Any, tensor: torch.Tensor, src: int = 0) -> None:
    from torch.distributed import BroadcastOptions

    opts = BroadcastOptions()
    opts.rootRank, opts.rootTensor = src, 0
    group.broadcast([tensor], opts).wait()


def agree(group: Any, ok: bool) -> bool:
    """Every rank's go/no-go, combined: True only if all ranks said ok."""
    from torch.distributed import AllreduceOptions, ReduceOp

    flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
    opts = AllreduceOptions()
    opts.reduceOp = ReduceOp.MIN
    group.allreduce([flag], opts).wait()
    return bool(flag.item())
