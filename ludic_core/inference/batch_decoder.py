"""Batched KV-cache decoding over a transformers causal LM.

A hand-written loop instead of `model.generate` because we need (a) per-row
temperature / top-p / seed / stop strings in one batch, (b) log-probs of the
distribution actually sampled from (`generate`'s scores are post-processed,
e.g. by min_new_tokens), and (c) less per-step overhead. Finished rows are
dropped from the batch (and the KV cache) as they finish.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from ludic_core.inference.sampling import SamplingConfig
from ludic_core.inference.token_sampler import sample_tokens

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
    generator: torch.Generator
    max_new: int
    tokens: list[int]
    logprobs: list[float]
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
        gen = torch.Generator()
        gen.manual_seed(sampling.seed if sampling.seed is not None else secrets.randbits(63))
        longest_stop = max((len(s) for s in sampling.stop), default=0)
        return _Row(
            prompt=list(prompt),
            sampling=sampling,
            generator=gen,
            max_new=min(sampling.max_tokens, self.max_len - len(prompt)),
            tokens=[],
            logprobs=[],
            # Enough trailing tokens to contain any stop string (a token is >= 1 byte).
            stop_window=4 * longest_stop + 4,
        )

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], samplings: Sequence[SamplingConfig]) -> list[Generation]:
        if len(prompts) != len(samplings):
            raise ValueError("one SamplingConfig per prompt is required")
        if not prompts:
            return []
        rows = [self._make_row(p, s) for p, s in zip(prompts, samplings)]
        device = next(self.model.parameters()).device
        width = max(len(r.prompt) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r.prompt):] = torch.tensor(r.prompt)
            mask[i, width - len(r.prompt):] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp_min(0)
        temps = torch.tensor([r.sampling.temperature for r in rows], dtype=torch.float32)
        top_ps = torch.tensor([r.sampling.top_p for r in rows], dtype=torch.float32)

        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        out = self.model(  # logits for the last position only: [B, 1, V], not [B, T, V]
            input_ids=ids, attention_mask=mask, position_ids=positions,
            past_key_values=cache, use_cache=True, logits_to_keep=1,
        )
        logits = out.logits[:, -1, :].float().cpu()
        live = list(range(len(rows)))  # indices into `rows` of rows still decoding
        next_pos = positions[:, -1] + 1
        while live:
            tokens, lps = sample_tokens(
                logits, temps, top_ps, [rows[i].generator for i in live]
            )
            keep: list[int] = []
            for j, i in enumerate(live):
                self._advance(rows[i], int(tokens[j]), float(lps[j]))
                if rows[i].done is None:
                    keep.append(j)
            if not keep:
                break
            if len(keep) < len(live):
                sel = torch.tensor(keep, device=device)
                cache.batch_select_indices(sel)
                mask, next_pos = mask[sel], next_pos[sel]
                tokens, temps, top_ps = tokens[keep], temps[keep], top_ps[keep]
                live = [live[j] for j in keep]
            mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=-1)
            out = self.model(
                input_ids=tokens.view(-1, 1).to(device), attention_mask=mask,
                position_ids=next_pos.view(-1, 1), past_key_values=cache, use_cache=True,
            )
            logits = out.logits[:, -1, :].float().cpu()
            next_pos = next_pos + 1
        return [self._finish(r) for r in rows]

    def _advance(self, row: _Row, token: int, logprob: float) -> None:
        row.tokens.append(token)
        row.logprobs.append(logprob)
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

    def _finish(self, row: _Row) -> Generation:
        text = row.text
        if text is None:
            text = self.tokenizer.decode(row.tokens, skip_special_tokens=True)
        return Generation(
            prompt_token_ids=row.prompt,
            completion_token_ids=row.tokens,
            completion_logprobs=row.logprobs,
            text=text,
            finish_reason=row.done or "length",
        )
