"""Attention for a compiled decode step: one query per row against its own slot's keys.

Why not SDPA there: under `torch.compile`, transformers expands grouped KV heads
to every query head (`repeat_kv`, a copy of the whole cache at every step), and
SDPA's masked kernels tile 64 queries where a decode step has one. On an H200
(Qwen2.5-0.5B's shape, batch 128, 512 columns) that cost 240 us per layer, 75%
of a CUDA-graph step. Here the query heads of one KV group attend together and
the attention is a pointwise product and two reductions with fp32 accumulation
(as SDPA's kernels accumulate), which inductor fuses into kernels that read each
key and value once.

Everything else (prefill, eager decode steps, training, a model with logit
soft-capping or attention sinks) goes to transformers' own SDPA.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

import torch

__all__ = ["DECODE_ATTENTION", "decode_attention", "decode_attention_on"]

#: The name the decode attention is registered under (transformers' `AttentionInterface`).
DECODE_ATTENTION = "ludic_decode"

_REGISTERED = False


def decode_attention(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, dropout: float = 0.0, scaling: float | None = None,
                     **kwargs: Any) -> tuple[torch.Tensor, None]:
    """query [B, H, 1, D], key/value [B, G, C, D] (G KV heads), a 4-D mask [B, 1, 1, C]
    (bool: True attends; or additive) -> ([B, 1, H, D], None), transformers' layout."""
    if (query.shape[2] != 1 or attention_mask is None or attention_mask.dim() != 4 or kwargs.get("softcap")
            or kwargs.get("s_aux") is not None or not torch.compiler.is_compiling()):
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling,
                                      **kwargs)
    batch, heads, _, dim = query.shape
    groups = key.shape[1]
    scale = scaling if scaling is not None else dim ** -0.5
    # query heads h = g * (heads // groups) + r share KV head g (transformers' `repeat_kv` order)
    q = query.reshape(batch, groups, heads // groups, 1, dim).float()
    scores = (q * key[:, :, None].float()).sum(-1) * scale  # [B, G, heads/G, C]
    mask = attention_mask[:, :1]  # shared by every head
    if mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    else:
        scores = scores + mask.float()
    probs = torch.softmax(scores, dim=-1)
    out = (probs[..., None] * value[:, :, None].float()).sum(-2)  # [B, G, heads/G, D]
    return out.to(query.dtype).reshape(batch, 1, heads, dim), None


def _register() -> None:
    global _REGISTERED
    if _REGISTERED:
        return
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    AttentionInterface.register(DECODE_ATTENTION, decode_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(DECODE_ATTENTION, sdpa_mask)  # never consulted: our masks are 4-D
    _REGISTERED = True


@contextlib.contextmanager
def decode_attention_on(model: Any) -> Iterator[None]:
    """Route `model`'s attention through `decode_attention` while the block runs."""
    _register()
    configs = {id(c): c for c in (model.config, model.config.get_text_config())}.values()
    before = [c._attn_implementation for c in configs]
    for c in configs:
        c._attn_implementation = DECODE_ATTENTION
    try:
        yield
    finally:
        for c, name in zip(configs, before):
            c._attn_implementation = name
