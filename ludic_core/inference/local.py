"""`LocalChatClient`: an in-process inference engine over transformers.

The zero-setup default: no server, no GPU. Concurrent `complete` calls are
decoded together (`BatchDecoder`), so an async rollout engine gets batched
throughput without any extra machinery.

How batching works: a caller that finds no decode loop running starts one.
The loop first yields to the event loop so the other ready callers can
enqueue, then decodes in a worker thread (the event loop stays responsive, so
episodes whose turn came back step their envs meanwhile). Each request's
answer is delivered the moment its row finishes, and with
`continuous_batching` a request that arrives meanwhile (the next turn of a
game that just got its answer) joins the running batch at the next decode
step instead of waiting for the batch's slowest row.

LoRA adapters are served as vLLM serves them (`inference.adapters`): loaded
under a name (`load_adapter`), picked by a request's `model` field, one
adapter per decode batch; requests for another adapter wait for the next.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

import torch

from ludic_core import openmp
from ludic_core.device import model_device, place_model, resolve_dtype
from ludic_core.inference.adapters import ServedAdapters, UnknownModelError
from ludic_core.inference.batch_decoder import BatchDecoder, Generation
from ludic_core.inference.chat_render import chat_prompt_ids
from ludic_core.inference.errors import ContextLengthError
from ludic_core.inference.sampling import ChatCompletionRequest
from ludic_core.types import ChatResponse

__all__ = ["LocalChatClient"]

log = logging.getLogger(__name__)

#: How many rendered prompts a client keeps (`encode_prompt`); the least recently used goes first.
PROMPT_CACHE = 512


class LocalChatClient:
    """`ChatClient` that runs a transformers model in this process."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any | None = None,
        *,
        device: str = "auto",
        dtype: str = "auto",
        max_batch_size: int | None = None,
        policy_version: int = 0,
        continuous_batching: bool = True,
        compile: bool | str = "auto",
        served_model_name: str = "policy",
        keep_last: int = 2,
    ) -> None:
        """`model`: an HF model directory, or a model object with its `tokenizer`.

        device / dtype are `ludic_core.device` specs: `auto` decodes on the GPU
        when there is one (bf16 there, fp32 on the CPU). A model object already
        on a GPU stays there under `auto`; its dtype changes only when `dtype`
        names one. `max_batch_size` None: 256 on a GPU (a 16 x 8 GRPO step in
        one batch; decoding there is launch-bound, so rows are nearly free), 64
        on the CPU. `continuous_batching` False makes arrivals wait for the
        running batch to finish (the behaviour of a plain batched `generate`).
        `compile`: see `BatchDecoder` ("auto": CUDA graphs on a GPU, eager on
        the CPU). `served_model_name`: the `model` a request names for the bare
        base once adapters are loaded; `keep_last`: adapters kept loaded.
        """
        if isinstance(model, (str, Path)):
            from ludic_core.models.loading import load_model_and_tokenizer

            model, loaded_tok = load_model_and_tokenizer(model, dtype=dtype, device=device)
            tokenizer = tokenizer or loaded_tok
        elif tokenizer is None:
            raise ValueError("a tokenizer is required when passing a model object")
        else:
            model, _ = place_model(model, device)
            if dtype != "auto":
                model = model.to(resolve_dtype(dtype, model_device(model)))
        if max_batch_size is None:
            max_batch_size = 256 if model_device(model).type == "cuda" else 64
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.max_batch_size = max_batch_size
        self.policy_version = policy_version
        self.continuous_batching = continuous_batching
        self._decoder = BatchDecoder(self.model, tokenizer, compile=compile)
        self.adapters = ServedAdapters(self.model, base_name=served_model_name, keep_last=keep_last)
        self._base_version = policy_version
        self._lock = threading.Lock()  # one decode loop or one weight swap at a time
        self._syncing = threading.Event()  # a weight swap waits: admit no new rows
        self._pending: list[tuple[ChatCompletionRequest, list[int], asyncio.Future]] = []
        self._pending_lock = threading.Lock()  # the loop appends, the decode thread takes
        self._drain_task: asyncio.Task | None = None
        self._prompts: OrderedDict[str, tuple[int, ...]] = OrderedDict()  # rendered prompts, by content
        # One dedicated decode thread: torch keeps one OpenMP pool per calling
        # thread, and alternating threads on 2 cores measured ~40% slower.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="ludic-decode")
        if model_device(model).type == "cpu" and openmp.status() == "late":
            log.info("OpenMP keeps its short spin-wait (torch loaded before ludic_core.openmp.configure() "
                     "ran): with a decode thread and a training thread, small CPU ops run up to 3x slower. "
                     "Call it before importing torch, or set %s.",
                     " ".join(f"{k}={v}" for k, v in openmp.SETTINGS.items()))
        self.stats = {"batches": 0, "requests": 0, "max_batch": 0, "decode_steps": 0, "compile_seconds": 0.0}

    # ---- prompts -------------------------------------------------------
    def encode_prompt(self, request: ChatCompletionRequest) -> list[int]:
        """Render messages with the chat template; the ids the model sees (message text
        never becomes a special id: `chat_render`).

        Kept by content for the last `PROMPT_CACHE` prompts: a GRPO group's completions share
        one prompt, and rendering the template and tokenizing it was ~5% of a CPU GRPO step's
        main thread, where it holds the GIL the decode thread needs."""
        try:
            key: str | None = json.dumps([request.messages, request.tools], sort_keys=True)
        except (TypeError, ValueError):  # content json cannot spell: rendered every time
            key = None
        if key is not None and (ids := self._prompts.get(key)) is not None:
            self._prompts.move_to_end(key)
            return list(ids)
        prompt = chat_prompt_ids(self.tokenizer, request.message_list(), tools=request.tools)
        if key is not None:
            self._prompts[key] = tuple(prompt)
            if len(self._prompts) > PROMPT_CACHE:
                self._prompts.popitem(last=False)
        return prompt

    # ---- ChatClient ----------------------------------------------------
    async def complete(self, request: ChatCompletionRequest) -> tuple[ChatResponse, dict[str, Any]]:
        self.adapters.resolve(request.model)  # an unknown name fails now, not in the batch
        prompt = self.encode_prompt(request)
        if len(prompt) >= self._decoder.max_len:  # fail this caller only, not its batch
            raise ContextLengthError(
                f"prompt has {len(prompt)} tokens; the model's context is {self._decoder.max_len}"
            )
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        with self._pending_lock:
            self._pending.append((request, prompt, fut))
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = asyncio.create_task(self._drain())
        return await fut

    def sync_weights(self, params: Mapping[str, Any], *, version: int) -> int:
        """Copy `params` into the model in place; all-or-nothing.

        Every name must exist and every shape match, else nothing is changed and
        the error lists the offending names.
        """
        state = self.adapters.base_state()
        unknown = [k for k in params if k not in state]
        bad_shape = [
            f"{k}: got {tuple(v.shape)}, expected {tuple(state[k].shape)}"
            for k, v in params.items()
            if k in state and tuple(v.shape) != tuple(state[k].shape)
        ]
        if unknown or bad_shape:
            raise ValueError(
                f"refusing weight sync to version {version}: unknown parameters {unknown[:5]}, "
                f"shape mismatches {bad_shape[:5]}; served weights unchanged"
            )
        self._syncing.set()  # in-flight rows finish on the old weights; new ones wait
        try:
            with self._lock, torch.no_grad():
                for k, v in params.items():
                    state[k].copy_(v)  # casts dtype and moves device in one go (buffers keep their addresses)
                self._base_version = int(version)
                if self.adapters.default is None:
                    self.policy_version = int(version)
        finally:
            self._syncing.clear()
        log.info("LocalChatClient now serves policy version %d (%d tensors)", version, len(params))
        return self.policy_version

    def load_adapter(self, name: str, tensors: Mapping[str, Any] | str | Path, config: Any = None, *,
                     version: int, make_default: bool = True) -> int:
        """Serve LoRA adapter `name` (PEFT-keyed `tensors` with a `peft.LoraConfig` or its dict,
        or an adapter directory) at policy `version`; by default requests that name no model
        get it from now on. A directory of another base is refused (fingerprints differ).

        Rows decoding meanwhile finish first, on the adapter they started with. The
        oldest adapters beyond `keep_last` are unloaded. Returns the default's version.
        """
        if isinstance(tensors, (str, Path)):
            tensors, config = self._read_adapter(tensors)
        elif config is None:
            raise ValueError(f"adapter {name!r}: tensors need their LoRA config")
        self._syncing.set()
        try:
            with self._lock:
                if self.adapters.peft is None:  # new layers: frames (and compiled steps) of the bare model go
                    self._decoder._frames.clear()
                    self._decoder.compile = False  # a compiled step would not see adapter switches
                gone = self.adapters.load(name, tensors, config, version=version, make_default=make_default)
                self.policy_version = self.adapters.version(self.adapters.default, self._base_version)
        finally:
            self._syncing.clear()
        log.info("LocalChatClient loaded adapter %s (version %d)%s", name, version,
                 f"; unloaded {gone}" if gone else "")
        return self.policy_version

    def _read_adapter(self, path: str | Path) -> tuple[dict, Any]:
        from ludic_core.lora.adapter_dir import base_fingerprint, check_base, read_adapter

        tensors, config, ref = read_adapter(path)
        mine = base_fingerprint(self.model)
        if ref is not None and ref["fingerprint"].get("dtype") == mine["dtype"]:  # values compare in one dtype
            check_base(ref, mine, getattr(self.model, "name_or_path", None), path)
        return tensors, config

    def unload_adapter(self, name: str) -> None:
        with self._lock:
            self.adapters.unload(name)
            self.policy_version = self.adapters.version(self.adapters.default, self._base_version)

    # ---- batching --------------------------------------------------------
    async def _drain(self) -> None:
        # Waiters from a loop that is gone (e.g. an earlier asyncio.run) are dropped.
        loop = asyncio.get_running_loop()
        with self._pending_lock:
            self._pending = [p for p in self._pending if p[2].get_loop() is loop and not p[2].done()]
        while self._pending:
            await self._gather_arrivals()
            in_flight: dict[int, tuple] = {}
            try:
                await loop.run_in_executor(self._executor, self._decode, loop, in_flight)
            except Exception as exc:  # every waiter of this loop gets the error, none hangs
                with self._pending_lock:
                    failed, self._pending = list(in_flight.values()) + self._pending, []
                for _, _, fut in failed:
                    if not fut.done():
                        fut.set_exception(exc)

    async def _gather_arrivals(self, max_yields: int = 8) -> None:
        """Yield to the loop until no new request shows up for two rounds."""
        quiet, seen = 0, len(self._pending)
        for _ in range(max_yields):
            await asyncio.sleep(0)
            if len(self._pending) == seen:
                quiet += 1
                if quiet >= 2 or seen >= self.max_batch_size:
                    return
            else:
                quiet, seen = 0, len(self._pending)

    def _decode(self, loop: asyncio.AbstractEventLoop, in_flight: dict[int, tuple]) -> None:
        """The decode thread: run the decoder until nothing is live or waiting."""
        def poll() -> list:
            # only this loop's requests: a run that outlives its loop (asyncio.run returned and
            # cancelled the drain task) must not take, and never answer, a later loop's;
            # and only those for the batch's adapter (the first request's): the rest wait
            with self._pending_lock:
                taken: list[Any] = []
                kept: list[Any] = []
                for p in self._pending:
                    if p[2].get_loop() is not loop:
                        kept.append(p)
                    elif (target := self._target(p, loop)) is not _FAILED:
                        if not adapter:
                            adapter.append(target)
                        (taken if target == adapter[0] else kept).append(p)
                self._pending = kept
            for item in taken:
                in_flight[id(item[2])] = item
            self.stats["requests"] += len(taken)
            return [(prompt, req.sampling, id(fut)) for req, prompt, fut in taken]

        def emit(key: int, gen: Generation) -> None:
            req, _, fut = in_flight.pop(key)
            # stats before the answer: a caller may read them as soon as its last answer is in
            self.stats["decode_steps"] = self._decoder.stats["steps"]
            self.stats["compile_seconds"] = self._decoder.stats["compile_seconds"]
            secs = time.perf_counter() - start
            response = self._to_response(req, gen, version, sizes[0], secs)
            try:
                loop.call_soon_threadsafe(_resolve, fut, response)
            except RuntimeError:  # its loop is closed: nobody waits for this answer any more
                pass

        while self._syncing.is_set():  # a weight swap waits for the lock: let it go first
            time.sleep(0.001)
        with self._lock:
            start, sizes = time.perf_counter(), [0]
            adapter: list[Any] = []
            first = poll()
            if not adapter:
                return
            self.adapters.activate(adapter[0])
            version = self.adapters.version(adapter[0], self._base_version)
            sizes[0] = len(first)
            self.stats["batches"] += 1
            self.stats["max_batch"] = max(self.stats["max_batch"], sizes[0])
            queue = [first]
            self._decoder.run(lambda: queue.pop() if queue else poll(), emit, max_batch=self.max_batch_size,
                              continuous=self.continuous_batching, admitting=lambda: not self._syncing.is_set())

    def _target(self, pending: tuple, loop: asyncio.AbstractEventLoop) -> Any:
        """The adapter a pending request runs on now; an adapter unloaded since it
        arrived fails that request alone."""
        try:
            return self.adapters.resolve(pending[0].model)
        except UnknownModelError as exc:
            loop.call_soon_threadsafe(_fail, pending[2], exc)
            return _FAILED

    @staticmethod
    def _to_response(
        req: ChatCompletionRequest, gen: Generation, version: int, batch_size: int, secs: float
    ) -> tuple[ChatResponse, dict[str, Any]]:
        want_ids, want_lp = req.returns.return_token_ids, req.returns.return_logprobs
        resp = ChatResponse(
            text=gen.text,
            prompt_token_ids=gen.prompt_token_ids if want_ids else [],
            completion_token_ids=gen.completion_token_ids if want_ids else [],
            completion_logprobs=gen.completion_logprobs if (want_lp and want_ids) else None,
            finish_reason=gen.finish_reason,
            policy_version=version,
        )
        return resp, {"backend": "local", "batch_size": batch_size, "batch_seconds": secs}


_FAILED = object()


def _fail(fut: asyncio.Future, exc: BaseException) -> None:
    if not fut.done():
        fut.set_exception(exc)


def _resolve(fut: asyncio.Future, response: Any) -> None:
    if not fut.done():
        fut.set_result(response)
