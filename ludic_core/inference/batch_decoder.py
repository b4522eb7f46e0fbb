"""Batched decoding over a transformers causal LM, with per-row sampling and log-probs.

A hand-written loop instead of `model.generate` because we need (a) per-row
temperature / top-p / seed / stop strings in one batch, (b) log-probs of the
distribution actually sampled from (`generate`'s scores are post-processed,
e.g. by min_new_tokens), (c) rows that join and leave a running batch, and
(d) a decode step that costs the hardware's time, not Python's.

The fast path (`DecodeFrame`) keeps a pre-allocated KV cache per shape bucket
(slots rounded up to a power of two, columns likewise) and runs each step as one
function of those buffers: compiled once per bucket, and a CUDA graph on a GPU.
A finished row's slot takes the next waiting request at once (`run`), so a
multi-turn rollout never waits for a batch's slowest member. Models whose
attention cannot take an explicit 4-D mask (flash-attention kernels, custom
caches) decode on the original dynamic-cache loop (`_DynamicLoop`), with
finished rows dropped from the batch.
"""

from __future__ import annotations

import inspect
import logging
import secrets
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from ludic_core.device import attention_backends, model_device
from ludic_core.inference.decode_frame import DecodeFrame, RowState
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.inference.stop_strings import StopScanner
from ludic_core.inference.token_sampler import sample_tokens, step_uniforms

log = logging.getLogger(__name__)

__all__ = ["Generation", "BatchDecoder"]

#: CUDA-graph decode steps between host reads of a frame (finished rows, stop strings). On an
#: H200 a read after every step cost 1.5 ms of a 9 ms step (batch 128, Qwen2.5-0.5B's shape).
SYNC_EVERY = 4


@dataclass
class Generation:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float]
    text: str
    finish_reason: str  # "stop" | "length"


#: A request for `BatchDecoder.run`: (prompt ids, sampling, caller's key).
Request = tuple[Sequence[int], SamplingConfig, Any]


def _pow2(n: int, floor: int) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


class BatchDecoder:
    """Decodes many prompts at once, one forward pass per step for the whole batch.

    compile: "auto" compiles the decode step on a GPU (CUDA graphs: decoding
    there is bound by kernel launches) and not on the CPU, where inductor took
    ~12 s per shape bucket (3 s from its on-disk cache) for ~1.2x faster calls of
    a tiny model (it pays off after some 10k steps, not in a demo or a test); True compiles on either,
    False never. A failed compile logs a warning and decodes eagerly.
    `max_frames` bucket frames (KV caches) are kept for reuse: a multi-turn
    rollout's batch sizes change every turn, and allocating a frame costs more
    than several decode steps of a small model.
    """

    def __init__(self, model: Any, tokenizer: Any, *, compile: bool | str = "auto", max_frames: int = 8) -> None:
        self.model = model
        self.tokenizer = tokenizer
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        if not eos_ids:
            raise ValueError("model/tokenizer define no eos token; cannot tell when to stop")
        self._frames: dict[tuple[int, int], DecodeFrame] = {}
        self.eos_ids = eos_ids
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
        self.max_len = int(getattr(model.config, "max_position_embeddings", 1 << 30))
        if compile not in ("auto", True, False):
            raise ValueError(f"compile must be 'auto', True or False, got {compile!r}")
        self.compile = compile
        self.max_frames = max_frames
        self.cache_kwarg = _cache_kwarg(model)
        attn = getattr(model.config, "_attn_implementation", None) or "eager"
        self.fast = self.cache_kwarg is not None and attn in ("sdpa", "eager")
        self.additive_mask = attn == "eager"
        if not self.fast:
            log.info("%s (attention %r): decoding on the dynamic-cache loop", type(model).__name__, attn)
        # The slot frame's mask is full attention: a batch whose rows outgrow a sliding window
        # decodes on the dynamic-cache loop, where transformers' masks apply the window.
        self.window = _sliding_window(model.config.get_text_config())
        # slot_steps: slots run, summed over steps (a compiled step runs every slot of its frame)
        self.stats = {"steps": 0, "slot_steps": 0, "admitted": 0, "frames": 0, "compile_seconds": 0.0}

    @property
    def eos_ids(self) -> set[int]:
        return self._eos_ids

    @eos_ids.setter
    def eos_ids(self, ids: set[int]) -> None:
        """Frames hold the eos ids on the device: a new set drops them (benchmarks force full-length rows)."""
        self._eos_ids = set(ids)
        self._frames.clear()

    # ---- public ----------------------------------------------------------------
    def generate(self, prompts: Sequence[Sequence[int]], samplings: Sequence[SamplingConfig],
                 *, max_batch: int | None = None) -> list[Generation]:
        """Decode every prompt; results in input order."""
        if len(prompts) != len(samplings):
            raise ValueError("one SamplingConfig per prompt is required")
        out: dict[int, Generation] = {}
        pending = [list(zip(prompts, samplings, range(len(prompts))))]

        def emit(key: int, gen: Generation) -> None:
            out[key] = gen

        self.run(lambda: pending.pop() if pending else [], emit, max_batch=max_batch or max(len(prompts), 1),
                 continuous=False)
        return [out[i] for i in range(len(prompts))]

    def run(self, poll: Callable[[], list[Request]], emit: Callable[[Any, Generation], None], *,
            max_batch: int, continuous: bool = True, admitting: Callable[[], bool] = lambda: True) -> None:
        """Decode requests as they come until none is live or waiting.

        `poll()` hands over newly arrived requests; `emit(key, generation)` is
        called as each finishes, possibly long before the batch does. With
        `continuous`, arrivals join free slots of the running batch at the next
        step; otherwise they wait for the next batch. `admitting()` False stops
        admissions (e.g. a weight update waits for in-flight rows).
        """
        waiting = [self._row(p, s, k) for p, s, k in poll()]
        with self._grad_mode(), attention_backends(model_device(self.model)):
            while waiting:
                batch, waiting = waiting[:max_batch], waiting[max_batch:]
                if not self.fast or not all(self._unwindowed(r) for r in batch):
                    self._run_dynamic(batch, emit)
                else:
                    waiting = self._run_frame(batch, waiting, poll, emit, max_batch, continuous, admitting)
                if admitting():
                    waiting += [self._row(p, s, k) for p, s, k in poll()]

    # ---- the fast path ---------------------------------------------------------------
    def _run_frame(self, batch, waiting, poll, emit, max_batch, continuous, admitting) -> list[RowState]:
        need = max(len(r.prompt) + r.max_new for r in batch)
        # headroom for joiners (a multi-turn prompt grows): free for eager steps, which read
        # only the columns in use; a compiled step reads them all, so on the CPU it stays tight
        tight = self._compile_mode() == "default"
        columns = _pow2(2 * need if continuous and not tight else need, 64)
        frame = self._frame(_pow2(len(batch), 1), columns)
        frame.admit(batch)
        self.stats["admitted"] += len(batch)
        # CUDA-graph steps are queued SYNC_EVERY at a time: reading the slots' state waits for the
        # GPU, and a host that waits after every step leaves the GPU idle while it launches the next
        every, stepped = (SYNC_EVERY if frame.compile_mode == "reduce-overhead" else 1), 0
        while frame.live():
            self.stats["slot_steps"] += frame.step()
            self.stats["steps"] += 1
            stepped += 1
            if stepped % every:
                continue  # finished rows stay put (done slots do not advance) until the next read
            for row, toks, lps, reason in frame.collect():
                emit(row.key, self._generation(row, toks, lps, reason))
            if not continuous or not admitting():
                continue
            waiting += [self._row(p, s, k) for p, s, k in poll()]
            join: list[RowState] = []
            free = len(frame.free_slots())
            while waiting and len(join) < free and frame.fits(waiting[0]) and self._unwindowed(waiting[0]):
                # FIFO: a head too big for this frame (or its window) waits for the next batch
                join.append(waiting.pop(0))
            if join:
                frame.admit(join)
                self.stats["admitted"] += len(join)
        self.stats["compile_seconds"] = sum(f.compile_seconds for f in self._frames.values())
        return waiting

    def _frame(self, slots: int, columns: int) -> DecodeFrame:
        key = (slots, columns)
        frame = self._frames.pop(key, None)
        if frame is None:
            while len(self._frames) >= self.max_frames:  # oldest first: frees its KV cache
                self._frames.pop(next(iter(self._frames)))
            frame = DecodeFrame(self.model, slots=slots, columns=columns, eos_ids=sorted(self.eos_ids),
                                pad_id=self.pad_id, cache_kwarg=self.cache_kwarg, additive_mask=self.additive_mask,
                                compile_mode=self._compile_mode())
            self.stats["frames"] += 1
        self._frames[key] = frame  # most recently used last
        return frame

    def _compile_mode(self) -> str | None:
        on_gpu = model_device(self.model).type == "cuda"
        if self.compile is False or (self.compile == "auto" and not on_gpu):
            return None
        return "reduce-overhead" if on_gpu else "default"

    def _grad_mode(self):
        # no inference_mode: a frame's buffers outlive the call and may later feed a compiled graph
        return torch.no_grad()

    # ---- rows ---------------------------------------------------------------------------
    def _row(self, prompt: Sequence[int], sampling: SamplingConfig, key: Any) -> RowState:
        if not prompt:
            raise ValueError("empty prompt: nothing to condition on")
        if len(prompt) >= self.max_len:
            raise ValueError(f"prompt has {len(prompt)} tokens; the model's context is {self.max_len}")
        seed = sampling.seed % (1 << 63) if sampling.seed is not None else secrets.randbits(63)
        return RowState(key=key, prompt=list(prompt), sampling=sampling, seed=seed,
                        max_new=min(sampling.max_tokens, self.max_len - len(prompt)),
                        scanner=StopScanner(self.tokenizer, sampling.stop))

    def _unwindowed(self, row: RowState) -> bool:
        """Whether `row` stays within the model's sliding window (if any), where full attention is exact."""
        return self.window is None or len(row.prompt) + row.max_new <= self.window

    def _generation(self, row: RowState, tokens: list[int], logprobs: list[float], reason: str) -> Generation:
        text = row.scanner.cut(tokens) if reason == "stop" and row.scanner.stops and tokens[-1] not in self.eos_ids \
            else self.tokenizer.decode(tokens, skip_special_tokens=True)
        return Generation(prompt_token_ids=row.prompt, completion_token_ids=tokens, completion_logprobs=logprobs,
                          text=text, finish_reason=reason)

    # ---- the fallback: a dynamic cache, finished rows dropped ------------------------------
    def _run_dynamic(self, rows: list[RowState], emit: Callable[[Any, Generation], None]) -> None:
        device = model_device(self.model)
        width = max(len(r.prompt) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r.prompt):] = torch.tensor(r.prompt)
            mask[i, width - len(r.prompt):] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        steps = max(r.max_new for r in rows)
        temps = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32, device=device)
        top_ps = (torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32, device=device)
                  if any(r.sampling.top_p < 1.0 for r in rows) else None)
        uniforms = step_uniforms(torch.tensor([r.seed for r in rows], device=device), steps)
        greedy = any(r.sampling.temperature == 0 for r in rows)
        logprobs = torch.zeros((len(rows), steps), dtype=torch.float32, device=device)
        live_at = torch.arange(len(rows), device=device)  # row index of each live batch slot
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        kw = {self.cache_kwarg or "past_key_values": cache}
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True,
                         logits_to_keep=1, **kw)
        live = list(range(len(rows)))
        reasons: dict[int, str] = {}
        next_pos = positions[:, -1] + 1
        for step in range(steps):
            tokens, lps = sample_tokens(out.logits[:, -1, :], temps, top_ps, uniforms[:, step], greedy_rows=greedy)
            logprobs[live_at, step] = lps
            keep: list[int] = []
            for j, (i, token) in enumerate(zip(live, tokens.tolist())):  # the one host transfer
                row = rows[i]
                row.tokens.append(token)
                if token in self.eos_ids or row.scanner.scan(row.tokens) is not None:
                    reasons[i] = "stop"
                elif len(row.tokens) >= row.max_new:
                    reasons[i] = "length"
                else:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(live):
                sel = torch.tensor(keep, device=device)
                cache.batch_select_indices(sel)
                mask, next_pos, tokens, temps, uniforms, live_at = (
                    t[sel] for t in (mask, next_pos, tokens, temps, uniforms, live_at))
                top_ps = top_ps[sel] if top_ps is not None else None
                live = [live[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=-1)
            out = self.model(input_ids=tokens.view(-1, 1), attention_mask=mask, position_ids=next_pos.view(-1, 1),
                             use_cache=True, **kw)
            next_pos = next_pos + 1
        host_lps = logprobs.cpu()  # once per batch
        for i, row in enumerate(rows):
            emit(row.key, self._generation(row, row.tokens, host_lps[i, :len(row.tokens)].tolist(),
                                           reasons.get(i, "length")))


def _sliding_window(config: Any) -> int | None:
    """The attention window of a model with sliding-window layers (None: every layer attends fully)."""
    window = getattr(config, "sliding_window", None)
    types = getattr(config, "layer_types", None)
    if window is None or (types and "sliding_attention" not in types):
        return None
    return int(window)


def _cache_kwarg(model: Any) -> str | None:
    """The forward's KV-cache argument: `cache` (transformers >= 5.2x), else `past_key_values`."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return None
    for name in ("cache", "past_key_values"):
        if name in params:
            return name
    return None
