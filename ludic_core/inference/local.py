"""`LocalChatClient`: an in-process inference engine over transformers.

The zero-setup default: no server, no GPU. Concurrent `complete` calls that
arrive together (e.g. 64 episodes of a rollout batch waiting on their next
turn) are decoded as ONE batch with a KV cache, so an async rollout engine gets
batched throughput without any extra machinery.

How batching works: a caller that finds no drain task running starts one on
its event loop. The drain task yields to the loop so the other ready callers
can enqueue, decodes everything pending in a worker thread (the loop stays
responsive, so episodes whose turn came back step their envs meanwhile), and
repeats until the queue is empty.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Mapping

import torch

from ludic_core.device import model_device, place_model, resolve_dtype
from ludic_core.inference.batch_decoder import BatchDecoder, Generation
from ludic_core.inference.errors import ContextLengthError
from ludic_core.inference.sampling import ChatCompletionRequest
from ludic_core.types import ChatResponse

__all__ = ["LocalChatClient"]

log = logging.getLogger(__name__)


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
    ) -> None:
        """`model`: an HF model directory, or a model object with its `tokenizer`.

        device / dtype are `ludic_core.device` specs: `auto` decodes on the GPU
        when there is one (bf16 there, fp32 on the CPU). A model object already
        on a GPU stays there under `auto`; its dtype changes only when `dtype`
        names one. `max_batch_size` None: 256 on a GPU (a 16 x 8 GRPO step in
        one batch; decoding there is launch-bound, so rows are nearly free), 64
        on the CPU.
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
        self._decoder = BatchDecoder(self.model, tokenizer)
        self._lock = threading.Lock()  # one batch or one weight swap at a time
        self._pending: list[tuple[ChatCompletionRequest, list[int], asyncio.Future]] = []
        self._drain_task: asyncio.Task | None = None
        # One dedicated decode thread: torch keeps one OpenMP pool per calling
        # thread, and alternating threads on 2 cores measured ~40% slower.
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="ludic-decode")
        self.stats = {"batches": 0, "requests": 0, "max_batch": 0}

    # ---- prompts -------------------------------------------------------
    def encode_prompt(self, request: ChatCompletionRequest) -> list[int]:
        """Render messages with the chat template; the ids the model sees."""
        text = self.tokenizer.apply_chat_template(
            request.message_list(),
            tools=list(request.tools) if request.tools else None,
            add_generation_prompt=True,
            tokenize=False,
        )
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    # ---- ChatClient ----------------------------------------------------
    async def complete(self, request: ChatCompletionRequest) -> tuple[ChatResponse, dict[str, Any]]:
        prompt = self.encode_prompt(request)
        if len(prompt) >= self._decoder.max_len:  # fail this caller only, not its batch
            raise ContextLengthError(
                f"prompt has {len(prompt)} tokens; the model's context is {self._decoder.max_len}"
            )
        fut: asyncio.Future = asyncio.get_running_loop().create_future()
        self._pending.append((request, prompt, fut))
        if self._drain_task is None or self._drain_task.done():
            self._drain_task = asyncio.create_task(self._drain())
        return await fut

    def sync_weights(self, params: Mapping[str, Any], *, version: int) -> int:
        """Copy `params` into the model in place; all-or-nothing.

        Every name must exist and every shape match, else nothing is changed and
        the error lists the offending names.
        """
        state = self.model.state_dict()
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
        with self._lock, torch.no_grad():
            for k, v in params.items():
                state[k].copy_(v)  # casts dtype and moves device in one go
            self.policy_version = int(version)
        log.info("LocalChatClient now serves policy version %d (%d tensors)", version, len(params))
        return self.policy_version

    # ---- batching --------------------------------------------------------
    async def _drain(self) -> None:
        # Waiters from a loop that is gone (e.g. an earlier asyncio.run) are dropped.
        loop = asyncio.get_running_loop()
        self._pending = [p for p in self._pending if p[2].get_loop() is loop and not p[2].done()]
        while self._pending:
            await self._gather_arrivals()
            batch = self._pending[: self.max_batch_size]
            del self._pending[: len(batch)]
            try:
                results, version, secs = await loop.run_in_executor(self._executor, self._run_batch, batch)
            except Exception as exc:  # every waiter gets the error, none hangs
                for _, _, fut in batch:
                    if not fut.done():
                        fut.set_exception(exc)
                continue
            for (req, _, fut), gen in zip(batch, results):
                if not fut.done():
                    fut.set_result(self._to_response(req, gen, version, len(batch), secs))

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

    def _run_batch(self, batch: list) -> tuple[list[Generation], int, float]:
        with self._lock:
            start = time.perf_counter()
            version = self.policy_version
            gens = self._decoder.generate([p for _, p, _ in batch], [r.sampling for r, _, _ in batch])
            secs = time.perf_counter() - start
        self.stats["batches"] += 1
        self.stats["requests"] += len(batch)
        self.stats["max_batch"] = max(self.stats["max_batch"], len(batch))
        return gens, version, secs

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
