"""Data planes for pushing weights into a vLLM server (trainer side).

The control flow (pause, start, update, finish, resume) is the publisher's and
is the same for every backend; a transport only (1) joins the trainer<->worker
group during /init_weight_transfer_engine and (2) moves the bytes while the
server runs /update_weights. Both HTTP calls block on the server until the
collective on our side happens, so each runs on a side thread while this
thread does its half.

* `GlooTransport` pairs with ludic's `ludic_gloo` engine (CPU servers): flat
  uint8 buckets broadcast over a standalone gloo group.
* `NCCLTransport` pairs with vLLM's own `nccl` engine (CUDA servers) through
  vLLM's trainer-side helpers, so it needs the CUDA build of vLLM installed in
  the trainer's environment (`pip install .[vllm]`). It is not exercised on
  CPU-only machines.
"""

from __future__ import annotations

import logging
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Protocol, Sequence

import torch

from ludic_core.vllm.http import ControlClient
from ludic_core.vllm.plugin import ludic_gloo_wire as wire

__all__ = ["WeightTransport", "GlooTransport", "NCCLTransport", "make_transport"]

log = logging.getLogger(__name__)


class WeightTransport(Protocol):
    backend: str

    def connect(self, control: ControlClient, worker_world_size: int) -> None: ...

    def send(self, control: ControlClient, metas: Sequence[wire.TensorMeta],
             tensors: Sequence[torch.Tensor]) -> None: ...

    def close(self) -> None: ...


def _during(control: ControlClient, path: str, payload: dict, work) -> None:
    """POST `path` on a side thread while `work()` runs here; surface both errors.

    Never joins the side thread after a failure here: the server may be stuck
    in the matching collective until its timeout, and waiting would turn an
    error into a hang.
    """
    exe = ThreadPoolExecutor(1, thread_name_prefix="ludic-push")
    fut: Future = exe.submit(control.post, path, json=payload)
    try:
        work(fut)
        fut.result()
    finally:
        exe.shutdown(wait=False)


class GlooTransport:
    backend = wire.BACKEND

    def __init__(self, *, host: str = "127.0.0.1", bucket_bytes: int = 64 << 20, timeout_s: float = 60.0) -> None:
        self.host, self.bucket_bytes, self.timeout_s = host, bucket_bytes, timeout_s
        self._store = self._group = None

    def connect(self, control: ControlClient, worker_world_size: int) -> None:
        from datetime import timedelta

        from torch.distributed import TCPStore

        world = worker_world_size + 1
        store = TCPStore(self.host, 0, world, is_master=True, wait_for_workers=False,
                         timeout=timedelta(seconds=self.timeout_s))
        info = {"master_address": self.host, "master_port": store.port, "world_size": world,
                "rank_offset": 1, "timeout_s": self.timeout_s}

        def join(fut: Future) -> None:
            self._store, self._group = wire.open_group(self.host, store.port, 0, world, self.timeout_s, store=store)

        _during(control, "/init_weight_transfer_engine", {"init_info": info}, join)
        log.info("gloo weight transfer: joined %d server worker(s) via %s:%d", worker_world_size,
                 self.host, store.port)

    def send(self, control: ControlClient, metas: Sequence[wire.TensorMeta],
             tensors: Sequence[torch.Tensor]) -> None:
        if self._group is None:
            raise RuntimeError("GlooTransport.send before connect")
        info = wire.encode_update(metas, self.bucket_bytes)

        def stream(fut: Future) -> None:
            if not wire.agree(self._group, True):  # a worker refused the metadata
                fut.result()  # raises with the server's reason
                raise RuntimeError("a server worker refused the weight update")
            buckets = info["buckets"]
            # Pack bucket i+1 on a helper thread while bucket i is on the wire
            # (both release the GIL): the copy hides behind the transfer.
            with ThreadPoolExecutor(1, thread_name_prefix="ludic-pack") as packer:
                pack = lambda b: packer.submit(wire.pack_bucket, tensors[b[0]:b[1]])  # noqa: E731
                ahead = pack(buckets[0]) if buckets else None
                for i in range(len(buckets)):
                    buf = ahead.result()
                    ahead = pack(buckets[i + 1]) if i + 1 < len(buckets) else None
                    wire.broadcast(self._group, buf)

        _during(control, "/update_weights", {"update_info": info}, stream)

    def close(self) -> None:
        self._group = self._store = None


class NCCLTransport:
    """vLLM's packed NCCL broadcast (CUDA only; needs vLLM in this environment)."""

    backend = "nccl"

    def __init__(self, *, host: str = "127.0.0.1", bucket_bytes: int = 64 << 20, num_buffers: int = 2) -> None:
        self.host, self.bucket_bytes, self.num_buffers = host, bucket_bytes, num_buffers
        self._group: Any = None

    def connect(self, control: ControlClient, worker_world_size: int) -> None:
        from vllm.distributed.weight_transfer.nccl_common import trainer_init as open_endpoint

        from ludic_core.ports import free_port

        port = free_port(self.host)
        rendezvous = {"master_address": self.host, "master_port": port, "world_size": worker_world_size + 1}
        # The wire params must agree on both sides, so they ride the init handshake.
        info = {**rendezvous, "rank_offset": 1, "packed": True,
                "packed_buffer_size_bytes": self.bucket_bytes, "packed_num_buffers": self.num_buffers}

        def join(fut: Future) -> None:
            self._group = open_endpoint(rendezvous)

        _during(control, "/init_weight_transfer_engine", {"init_info": info}, join)

    def send(self, control: ControlClient, metas: Sequence[wire.TensorMeta],
             tensors: Sequence[torch.Tensor]) -> None:
        from vllm.distributed.weight_transfer.packed_tensor import packed_nccl_broadcast_producer

        update = {"names": [m.name for m in metas], "dtype_names": [m.dtype for m in metas],
                  "shapes": [list(m.shape) for m in metas]}
        pairs = ((m.name, t.detach().cuda()) for m, t in zip(metas, tensors))

        def stream(fut: Future) -> None:
            packed_nccl_broadcast_producer(iterator=pairs, group=self._group, src=0,
                                           post_iter_func=lambda item: item[1],
                                           buffer_size_bytes=self.bucket_bytes, num_buffers=self.num_buffers)
            torch.cuda.current_stream().synchronize()

        _during(control, "/update_weights", {"update_info": update}, stream)

    def close(self) -> None:
        if self._group is not None:
            self._group.destroy()
            self._group = None


def make_transport(kind: str, **kwargs: Any) -> WeightTransport:
    """"gloo", "nccl", or "auto" (nccl when this process sees a GPU)."""
    if kind == "auto":
        kind = "nccl" if torch.cuda.is_available() else "gloo"
    if kind in ("gloo", wire.BACKEND):
        return GlooTransport(**kwargs)
    if kind == "nccl":
        return NCCLTransport(**kwargs)
    raise ValueError(f"unknown weight transport {kind!r}; use 'gloo', 'nccl' or 'auto'")
