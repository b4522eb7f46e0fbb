"""`DecodeFrame`: fixed-shape decode state (slots x columns) for one shape bucket.

Everything a decode step reads or writes lives in buffers allocated once per
bucket: the KV cache (`SlotCache`), each slot's next token, length, completion
count, limit, sampling parameters and counter-based uniforms, and the sampled
tokens and log-probs. A step is then one function of those buffers with no
host round trip, so it can be compiled once per bucket and, on a GPU, replayed
as a CUDA graph (`torch.compile(mode="reduce-overhead")`): decoding a small
model is bound by kernel launches, not by compute. A compiled step runs every
slot (static shapes); free and finished ones do not advance. An eager step runs
only the slots up to the last occupied one, and `collect` moves the highest
occupied slots into the slots freed below them, so rows that end early (eos,
their own max_tokens, a stop string) stop costing steps.

Prompts enter through `admit`, an ordinary eager forward over just the joining
rows whose keys/values are copied into their slots: a slot freed by a finished
row takes a waiting request at the next step (continuous batching). Identical
prompts are prefilled once, and an opening that all joining prompts share (a
system prompt) once.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from ludic_core.device import forward_cost_tokens
from ludic_core.inference.decode_attention import decode_attention_on
from ludic_core.inference.decode_forward import DecodeForward
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.inference.slot_cache import SlotCache
from ludic_core.inference.stop_strings import StopScanner
from ludic_core.inference.token_sampler import sample_tokens, step_uniforms

__all__ = ["DecodeFrame", "RowState"]

log = logging.getLogger(__name__)

#: Decode steps between stop-string scans of a running row (each scan decodes a window of its tokens).
STOP_SCAN_EVERY = 4

#: Compiled decode steps one process may hold: every bucket (slots x columns, with or without
#: top-p) is one compile of the same function. torch's default, 8 per function, is reached by
#: a run whose batch sizes and lengths vary; past it torch runs the step eagerly and silently.
#: Buckets are powers of two, so a process sees at most a few dozen; 256 bounds them all.
RECOMPILE_LIMIT = 256


def _allow_bucket_recompiles() -> None:
    """Raise torch's per-function recompile limit (never lower it) to `RECOMPILE_LIMIT`."""
    config = torch._dynamo.config
    name = "recompile_limit" if hasattr(config, "recompile_limit") else "cache_size_limit"
    if getattr(config, name) < RECOMPILE_LIMIT:
        setattr(config, name, RECOMPILE_LIMIT)
    if getattr(config, "accumulated_recompile_limit", RECOMPILE_LIMIT) < RECOMPILE_LIMIT:
        config.accumulated_recompile_limit = RECOMPILE_LIMIT


@dataclass
class RowState:
    """One request in a slot: what the host needs to finish it."""

    key: Any
    prompt: list[int]
    sampling: SamplingConfig
    seed: int
    max_new: int
    scanner: StopScanner
    tokens: list[int] = field(default_factory=list)  # host copy, kept only for rows with stop strings
    stopped_at: int | None = None  # index of the token that completed a stop string


def _common_prefix(prompts: Sequence[Sequence[int]]) -> int:
    """How many leading tokens every prompt shares, leaving each at least one of its own."""
    first, n = prompts[0], min(len(p) for p in prompts) - 1
    for p in prompts[1:]:
        n = next((i for i in range(n) if p[i] != first[i]), n)
    return n


class DecodeFrame:
    """Decode buffers for `slots` rows of up to `columns` tokens (prompt + completion) each."""

    def __init__(self, model: Any, *, slots: int, columns: int, eos_ids: Sequence[int], pad_id: int,
                 cache_kwarg: str, additive_mask: bool, compile_mode: str | None) -> None:
        self.model, self.slots, self.columns = model, slots, columns
        self.pad_id, self.cache_kwarg = pad_id, cache_kwarg
        device = next(model.parameters()).device
        self.device = device
        z = dict(device=device)
        self.lengths = torch.zeros(slots, dtype=torch.long, **z)  # cache length = position of the fed token
        self.tokens = torch.full((slots, 1), pad_id, dtype=torch.long, **z)  # the token fed next
        self.produced = torch.zeros(slots, dtype=torch.long, **z)
        self.limits = torch.ones(slots, dtype=torch.long, **z)
        self.done = torch.ones(slots, dtype=torch.bool, **z)  # free and finished slots do not advance
        self.temps = torch.ones(slots, dtype=torch.float32, **z)
        self.top_ps = torch.ones(slots, dtype=torch.float32, **z)
        self.uniforms = torch.zeros((slots, columns), dtype=torch.float64, **z)
        self.out_tokens = torch.zeros((slots, columns), dtype=torch.long, **z)
        self.out_logprobs = torch.zeros((slots, columns), dtype=torch.float32, **z)
        self.eos = torch.tensor(sorted(eos_ids), dtype=torch.long, **z)
        self.eos_ids = set(eos_ids)
        self.col_index = torch.arange(columns, **z)
        self.mask_dtype = next(model.parameters()).dtype
        self.mask_fill = torch.finfo(self.mask_dtype).min if additive_mask else None
        self.cache = SlotCache(model.config.get_text_config().num_hidden_layers, slots, columns, self.lengths)
        for t in (self.lengths, self.tokens, self.produced, self.limits, self.done, self.temps, self.top_ps,
                  self.uniforms, self.out_tokens, self.out_logprobs):
            torch._dynamo.mark_static_address(t)
        self.rows: list[RowState | None] = [None] * slots
        # transformers' wrappers skipped where the decoder is a known one (None: `model(...)`)
        self.forward = DecodeForward.of(model)
        self.compile_mode = compile_mode
        self._steps: dict[tuple[bool, bool], Callable[[], None]] = {}  # by (top-p rows, greedy rows)
        self.compile_seconds = 0.0
        self.unscanned = 0  # steps since running rows' stop strings were last scanned
        self.horizon = 1  # host bound: no live row has more than horizon - 1 tokens in its cache

    # ---- the device step ------------------------------------------------------
    def _step_impl(self, use_top_p: bool, greedy: bool, upto: int | None = None, active: int | None = None) -> None:
        cols = self.col_index if upto is None else self.col_index[:upto]

        def stepping(t: torch.Tensor) -> torch.Tensor:  # an eager step skips the free slots from `active` on
            return t if active is None else t[:active]

        lengths, tokens, produced, done = stepping(self.lengths), stepping(self.tokens), stepping(self.produced), stepping(self.done)
        visible = (cols[None, :] <= lengths[:, None])[:, None, None, :]
        if self.mask_fill is not None:  # eager attention adds its mask
            zero = torch.zeros((), dtype=self.mask_dtype, device=self.device)
            visible = torch.where(visible, zero, torch.full_like(zero, self.mask_fill))
        if self.forward is not None:
            logits = self.forward(tokens, lengths[:, None], visible, self.cache)
        else:
            logits = self.model(input_ids=tokens, attention_mask=visible, position_ids=lengths[:, None],
                                use_cache=True, **{self.cache_kwarg: self.cache}).logits[:, -1, :]
        k = produced.clamp_max(self.columns - 1)[:, None]
        tok, lp = sample_tokens(logits, stepping(self.temps), stepping(self.top_ps) if use_top_p else None,
                                stepping(self.uniforms).gather(1, k).squeeze(1), greedy_rows=greedy)
        stepping(self.out_tokens).scatter_(1, k, tok[:, None])
        stepping(self.out_logprobs).scatter_(1, k, lp[:, None])
        tokens.copy_(tok[:, None])
        live = (~done).long()
        lengths.add_(live)
        produced.add_(live)
        done.copy_(done | torch.isin(tok, self.eos) | (produced >= stepping(self.limits)))

    def step(self) -> int:
        """One decode step (compiled on its first use in this frame, if compiling) -> how many slots it ran:
        all of them compiled, the occupied ones eagerly."""
        rows = [r for r in self.rows if r is not None]
        variant = (any(r.sampling.top_p < 1.0 for r in rows), any(r.sampling.temperature == 0 for r in rows))
        if self.compile_mode is not None:
            self.cache.set_view(None)
            fn = self._steps.get(variant)
            if fn is None:
                fn = self._steps[variant] = self._compiled(*variant)
            if self.compile_mode == "reduce-overhead":
                torch.compiler.cudagraph_mark_step_begin()
            with decode_attention_on(self.model):
                fn()
            ran = self.slots
        else:  # eager: step the occupied slots only (`collect` packs them first), over the columns in use
            upto = min(self.horizon, self.columns)
            ran = max((s for s, r in enumerate(self.rows) if r is not None), default=-1) + 1
            active = ran if ran < self.slots else None  # None: every slot, no slicing
            self.cache.set_view(upto, active)
            self._step_impl(*variant, upto, active)
        self.horizon += 1
        self.unscanned += 1
        return ran

    def _compiled(self, use_top_p: bool, greedy: bool) -> Callable[[], None]:
        _allow_bucket_recompiles()
        compiled = torch.compile(self._step_impl, mode=self.compile_mode, dynamic=False)
        first = [True]

        def run() -> None:
            if not first[0]:
                compiled(use_top_p, greedy)
                return
            start = time.perf_counter()  # the one-off cost of this bucket: trace, compile, capture
            try:
                compiled(use_top_p, greedy)
            except Exception as exc:  # no compiler, an unsupported op...: decode eagerly
                log.warning("decode step not compiled (%s: %s); decoding eagerly", type(exc).__name__, exc)
                self.compile_mode = None
                self._step_impl(use_top_p, greedy, None)
            self.compile_seconds += time.perf_counter() - start
            first[0] = False
        return run

    # ---- admission: prefill joining rows into free slots ---------------------------
    def free_slots(self) -> list[int]:
        return [i for i, r in enumerate(self.rows) if r is None]

    def fits(self, row: RowState) -> bool:
        return len(row.prompt) + row.max_new <= self.columns

    def admit(self, rows: Sequence[RowState]) -> None:
        """Prefill `rows` (one eager forward over their distinct prompts) into free slots and
        sample their first tokens."""
        slots = self.free_slots()[:len(rows)]
        if self.forward is not None and self.forward.hooked():  # hooks registered since: run them
            log.info("forward hooks on %s: decoding through model(...)", type(self.model).__name__)
            self.forward = None
        if len(slots) < len(rows):
            raise RuntimeError(f"{len(rows)} rows to admit, {len(slots)} free slots")
        # Identical prompts (a GRPO group's completions) are prefilled once and copied to each slot.
        unique: dict[tuple[int, ...], int] = {}
        source = [unique.setdefault(tuple(r.prompt), len(unique)) for r in rows]
        prefill, last_logits, pieces = self._prefill(list(unique))
        self.cache.write_prompt(prefill, source, [pieces[i] for i in source], slots)
        logits = last_logits[torch.tensor(source, device=self.device)]
        z = dict(device=self.device)
        at = torch.tensor(slots, dtype=torch.long, **z)
        temps = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32, **z)
        top_ps = torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32, **z)
        uniforms = step_uniforms(torch.tensor([r.seed for r in rows], **z), self.columns)
        any_top_p = any(r.sampling.top_p < 1.0 for r in rows)
        tok, lp = sample_tokens(logits, temps, top_ps if any_top_p else None, uniforms[:, 0],
                                greedy_rows=any(r.sampling.temperature == 0 for r in rows))
        limits = torch.tensor([r.max_new for r in rows], dtype=torch.long, **z)
        self.lengths[at] = torch.tensor([len(r.prompt) for r in rows], dtype=torch.long, **z)
        self.tokens[at] = tok[:, None]
        self.produced[at] = 1
        self.limits[at] = limits
        self.temps[at], self.top_ps[at], self.uniforms[at] = temps, top_ps, uniforms
        self.out_tokens[at, 0], self.out_logprobs[at, 0] = tok, lp
        self.done[at] = torch.isin(tok, self.eos) | (limits <= 1)
        for s, r in zip(slots, rows):
            self.rows[s] = r
        self.horizon = max(self.horizon, max(len(r.prompt) for r in rows) + 1)

    def _prefill(self, prompts: list[tuple[int, ...]]) -> tuple[Any, torch.Tensor, list[tuple[slice, ...]]]:
        """One eager forward over distinct `prompts` -> (their KV cache, each one's last logits, and the
        cache columns holding each prompt, in order).

        Prompts that open alike (a system prompt, a chat template's header) share that opening's
        forward: it runs once, then the rest of every prompt runs against it. That pays when the
        positions it saves outweigh a second pass (`forward_cost_tokens`).
        """
        from transformers import DynamicCache

        shared = _common_prefix(prompts)
        if shared * (len(prompts) - 1) <= forward_cost_tokens(self.device):
            shared = 0
        cache = DynamicCache(config=self.model.config)
        kw = {self.cache_kwarg: cache, "use_cache": True, "logits_to_keep": 1}
        if shared:
            head = torch.tensor([prompts[0][:shared]], device=self.device)
            self.model(input_ids=head, position_ids=torch.arange(shared, device=self.device)[None], **kw)
            cache.batch_repeat_interleave(len(prompts))
        tails = [p[shared:] for p in prompts]
        width = max(len(t) for t in tails)
        ids = torch.full((len(tails), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(tails), shared + width), dtype=torch.long)
        mask[:, :shared] = 1
        for i, t in enumerate(tails):  # left-padded: every row's last token is the last column
            ids[i, width - len(t):] = torch.tensor(t)
            mask[i, shared + width - len(t):] = 1
        ids, mask = ids.to(self.device), mask.to(self.device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)[:, shared:]
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, **kw)
        end = shared + width
        pieces = [(slice(0, shared), slice(end - len(t), end)) if shared else (slice(end - len(t), end),)
                  for t in tails]
        return cache, out.logits[:, -1, :], pieces

    # ---- the host's view -------------------------------------------------------------
    def live(self) -> int:
        return sum(r is not None for r in self.rows)

    def collect(self) -> list[tuple[RowState, list[int], list[float], str]]:
        """Rows that finished (eos, length or a stop string) since the last call; frees their slots.

        One host transfer of the per-slot state, plus the tokens of rows that
        finished or carry stop strings.
        """
        done, produced, lengths = torch.stack([self.done.long(), self.produced, self.lengths]).tolist()
        live = [lengths[s] for s, r in enumerate(self.rows) if r is not None and not done[s]]
        self.horizon = max(live, default=0) + 1
        # Stop strings are scanned every STOP_SCAN_EVERY steps (exact: the scan finds the first
        # completing token among the new ones, and the row is cut there), not after every token.
        scan = self.unscanned >= STOP_SCAN_EVERY
        if scan:
            self.unscanned = 0
        watch = [s for s, r in enumerate(self.rows) if r is not None and (done[s] or (scan and r.scanner.stops))]
        if not watch:
            return []
        width = max(produced[s] for s in watch)
        idx = torch.tensor(watch, device=self.device)
        tokens = self.out_tokens[idx, :width].tolist()
        finished, host_lps, freed = [], None, []
        for j, s in enumerate(watch):
            row = self.rows[s]
            toks = tokens[j][:produced[s]]
            hit = row.scanner.scan(toks)
            if hit is not None:
                toks = toks[:hit + 1]
            elif not done[s]:
                continue
            if host_lps is None:
                host_lps = self.out_logprobs[idx, :width].tolist()
            reason = "stop" if hit is not None or toks[-1] in self.eos_ids else "length"
            finished.append((row, toks, host_lps[j][:len(toks)], reason))
            self.rows[s] = None
            freed.append(s)
        if freed:  # rows cut by a stop string stop advancing too
            self.done[torch.tensor(freed, device=self.device)] = True
            if self.compile_mode is None:
                self._pack()
        return finished

    def _pack(self) -> None:
        """Move the highest occupied slots into the free slots below them: an eager step runs slots
        [0, last occupied] only, so a batch whose rows finish at different lengths does not keep
        paying for the finished ones (on the CPU, half of tiny-1m's 32 rows cost ~70% of the step)."""
        free = [s for s, r in enumerate(self.rows) if r is None]
        used = [s for s, r in enumerate(self.rows) if r is not None]
        src, dst = [], []
        while free and used and free[0] < used[-1]:
            dst.append(free.pop(0))
            src.append(used.pop())
        if not src:
            return
        width = min(self.horizon, self.columns)  # no live row has this many tokens in its cache yet
        self.cache.move(src, dst, width)
        s, d = torch.tensor(src, device=self.device), torch.tensor(dst, device=self.device)
        for t in (self.lengths, self.tokens, self.produced, self.limits, self.done, self.temps, self.top_ps,
                  self.uniforms):  # all of a row's uniforms: its later tokens draw them
            t[d] = t[s]
        for t in (self.out_tokens, self.out_logprobs):  # nor produced this many
            t[d, :width] = t[s, :width]
        self.done[s] = True
        for a, b in zip(src, dst):
            self.rows[b], self.rows[a] = self.rows[a], None
