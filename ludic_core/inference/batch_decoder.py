"""Batched KV-cache decoding over a transformers causal LM.

A hand-written loop instead of `model.generate` because we need (a) per-row
temperature / top-p / seed / stop strings in one batch, (b) log-probs of the
distribution actually sampled from (`generate`'s scores are post-processed,
e.g. by min_new_tokens), and (c) less per-step overhead. Finished rows are
dropped from the batch (and the KV cache) as they finish.

Decoding stays on the model's device: logits, sampling and log-probs never
leave it; each step moves only the B chosen token ids to the host (eos and
stop strings are checked there), and the log-probs come back once per batch.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ludic_core.device import attention_backends, model_device
from ludic_core.inference.sampling import SamplingConfig
from ludic_core.inference.token_sampler import sample_tokens, step_uniforms

__all__ = ["Generation", "BatchDecoder"]


@dataclass
class Generation:
    prompt_token_ids: list[int]
    completion_token_ids: list[int]
    completion_logprobs: list[float]
    text: str
    finish_reason: str  # "stop" | "length"


@dataclass
class _Row:
    prompt: list[int]
    sampling: SamplingConfig
    seed: int
    max_new: int
    tokens: list[int]
    stop_window: int
    done: str | None = None
    text: str | None = None


class BatchDecoder:
    """Decodes a batch of prompts with one forward pass per step."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer
        eos = getattr(model.generation_config, "eos_token_id", None)
        eos_ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if tokenizer.eos_token_id is not None:
            eos_ids.add(tokenizer.eos_token_id)
        if not eos_ids:
            raise ValueError("model/tokenizer define no eos token; cannot tell when to stop")
        self.eos_ids = eos_ids
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else min(eos_ids)
        self.max_len = int(getattr(model.config, "max_position_embeddings", 1 << 30))

    def _make_row(self, prompt: Sequence[int], sampling: SamplingConfig) -> _Row:
        if not prompt:
            raise ValueError("empty prompt: nothing to condition on")
        if len(prompt) >= self.max_len:
            raise ValueError(
                f"prompt has {len(prompt)} tokens; the model's context is {self.max_len}"
            )
        seed = sampling.seed % (1 << 63) if sampling.seed is not None else secrets.randbits(63)
        longest_stop = max((len(s) for s in sampling.stop), default=0)
        return _Row(
            prompt=list(prompt),
            sampling=sampling,
            seed=seed,
            max_new=min(sampling.max_tokens, self.max_len - len(prompt)),
            tokens=[],
            # Enough trailing tokens to contain any stop string (a token is >= 1 byte).
            stop_window=4 * longest_stop + 4,
        )

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], samplings: Sequence[SamplingConfig]) -> list[Generation]:
        if len(prompts) != len(samplings):
            raise ValueError("one SamplingConfig per prompt is required")
        if not prompts:
            return []
        with attention_backends(model_device(self.model)):
            return self._generate(prompts, samplings)

    def _generate(self, prompts: Sequence[Sequence[int]], samplings: Sequence[SamplingConfig]) -> list[Generation]:
        rows = [self._make_row(p, s) for p, s in zip(prompts, samplings)]
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
        logprobs = torch.zeros((len(rows), steps), dtype=torch.float32, device=device)
        live_at = torch.arange(len(rows), device=device)  # row index of each live batch slot

        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        out = self.model(  # logits for the last position only: [B, 1, V], not [B, T, V]
            input_ids=ids, attention_mask=mask, position_ids=positions,
            past_key_values=cache, use_cache=True, logits_to_keep=1,
        )
        live = list(range(len(rows)))  # indices into `rows` of rows still decoding
        next_pos = positions[:, -1] + 1
        for step in range(steps):
            tokens, lps = sample_tokens(out.logits[:, -1, :], temps, top_ps, uniforms[:, step])
            logprobs[live_at, step] = lps
            keep: list[int] = []
            for j, (i, token) in enumerate(zip(live, tokens.tolist())):  # the one host transfer
                self._advance(rows[i], token)
                if rows[i].done is None:
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
            out = self.model(
                input_ids=tokens.view(-1, 1), attention_mask=mask,
                position_ids=next_pos.view(-1, 1), past_key_values=cache, use_cache=True,
            )
            next_pos = next_pos + 1
        host_lps = logprobs.cpu()  # once per batch
        return [self._finish(r, host_lps[i, :len(r.tokens)].tolist()) for i, r in enumerate(rows)]

    def _advance(self, row: _Row, token: int) -> None:
        row.tokens.append(token)
        if token in self.eos_ids:
            row.done = "stop"
            return
        if row.sampling.stop:
            tail = self.tokenizer.decode(row.tokens[-row.stop_window:], skip_special_tokens=True)
            if any(s in tail for s in row.sampling.stop):
                full = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
                cut = min(full.find(s) for s in row.sampling.stop if s in full)
                row.text, row.done = full[:cut], "stop"
                return
        if len(row.tokens) >= row.max_new:
            row.done = "length"

    def _finish(self, row: _Row, logprobs: list[float]) -> Generation:
        text = row.text
        if text is None:
            text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
        return Generation(
            prompt_token_ids=row.prompt,
            completion_token_ids=row.tokens,
            completion_logprobs=logprobs,
            text=text,
            finish_reason=row.done or "length",
        )
