"""`DecodeForward`: one decode token per row through a Llama-family model, minus transformers' wrappers.

An eager decode step of a small model on the CPU is mostly overhead, not compute: tiny-1m's
step (4 layers, batch 32) spends more time in Python and in ~150 small ops than in its matmuls
and attention. transformers' `model(...)` adds a module call with its hook checks at every
layer, norm, attention and MLP, keyword deprecation wrappers, and mask and output
bookkeeping. This calls the model's own projections, MLP weights, embedding, rotary module
and head (the projections as modules, so LoRA layers act), with RMSNorm as `F.rms_norm`
(its ops run from C++), q and k rotated together, and the mask made additive once a step
instead of by SDPA in every layer. On the CPU its logits and cache writes equal
`model(...)`'s bit for bit (tests check it); a step took 4.08 ms against 4.55 ms (tiny-1m,
batch 32, a 2-core EPYC).

Only architectures whose decoder is this code are accepted (`MODEL_TYPES`, SDPA attention,
every layer full attention); anything else, a model with forward hooks (they would be
bypassed) included, decodes through `model(...)`.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.nn.modules import module as nn_module

from ludic_core.inference.decode_attention import grouped_attention

__all__ = ["MODEL_TYPES", "DecodeForward"]

#: transformers model types whose decoder layer is Llama's: pre-norm RMSNorm, rotary q/k (Qwen3 with
#: a per-head RMSNorm before it), SDPA attention, a gated MLP.
MODEL_TYPES = frozenset({"llama", "mistral", "qwen2", "qwen3"})


def _norm(module: Any) -> Callable[[torch.Tensor], torch.Tensor]:
    """An RMSNorm module as `F.rms_norm`: its computation in fp32, then its weight in the input dtype."""
    weight, eps = module.weight, module.variance_epsilon
    shape = tuple(weight.shape)

    def norm(x: torch.Tensor) -> torch.Tensor:
        if x.dtype == torch.float32 and weight.dtype == torch.float32:
            return F.rms_norm(x, shape, weight, eps)
        return weight * F.rms_norm(x.float(), shape, eps=eps).to(x.dtype)
    return norm


class DecodeForward:
    """Logits [B, V] for one new token per row, written into a `SlotCache` at each row's position."""

    def __init__(self, model: Any) -> None:
        inner = model.model
        self.model, self.embed, self.rotary = model, inner.embed_tokens, inner.rotary_emb
        self.layers = list(inner.layers)
        self.final_norm = _norm(inner.norm)
        self.norms = [(_norm(layer.input_layernorm), _norm(layer.post_attention_layernorm)) for layer in self.layers]
        attn = self.layers[0].self_attn
        self.qk_norms = [(_norm(layer.self_attn.q_norm), _norm(layer.self_attn.k_norm))
                         if hasattr(attn, "q_norm") else None for layer in self.layers]
        self.head_dim = attn.head_dim
        self.bypassed = [model, inner, inner.norm, *self.layers]
        for layer in self.layers:
            self.bypassed += [layer.self_attn, layer.mlp, layer.input_layernorm, layer.post_attention_layernorm]
            self.bypassed += [getattr(layer.self_attn, n) for n in ("q_norm", "k_norm") if hasattr(layer.self_attn, n)]

    @classmethod
    def of(cls, model: Any) -> DecodeForward | None:
        """A `DecodeForward` for `model`, or None where its decoder is not one this reproduces."""
        config = model.config
        inner = getattr(model, "model", None)
        if (getattr(config, "model_type", None) not in MODEL_TYPES
                or getattr(config, "_attn_implementation", None) != "sdpa"
                or any(t != "full_attention" for t in (getattr(config, "layer_types", None) or ()))
                or getattr(config, "final_logit_softcapping", None)
                or not all(hasattr(inner, n) for n in ("embed_tokens", "rotary_emb", "layers", "norm"))
                or not hasattr(model, "lm_head")):
            return None
        forward = cls(model)
        return None if forward.hooked() else forward

    def hooked(self) -> bool:
        """Whether a module this bypasses has forward hooks (or any module has global ones)."""
        if nn_module._global_forward_hooks or nn_module._global_forward_pre_hooks:
            return True
        return any(m._forward_hooks or m._forward_pre_hooks for m in self.bypassed)

    def __call__(self, tokens: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor, cache: Any) -> torch.Tensor:
        """tokens, positions [B, 1]; visible [B, 1, 1, C] bool (True attends); cache a `SlotCache`."""
        x = self.embed(tokens)
        cos, sin = self.rotary(x, positions)  # [B, 1, D]
        # transformers' rotate_half(t) * sin is roll(t) * (sin with its first half negated): the same
        # products, exactly, for q and k of every layer at once (one op each, not nine per tensor)
        half = cos.shape[-1] // 2
        cos, sin = cos[:, :, None], torch.cat((-sin[..., :half], sin[..., half:]), -1)[:, :, None]
        # the additive form SDPA turns a bool mask into at every call, once
        mask = torch.zeros(visible.shape, dtype=x.dtype, device=x.device).masked_fill_(~visible, float("-inf"))
        batch, shape = tokens.shape[0], (tokens.shape[0], 1, -1, self.head_dim)
        for layer, (pre, post), qk_norm, kv in zip(self.layers, self.norms, self.qk_norms, cache.layers):
            attn = layer.self_attn
            h = pre(x)
            q, k = attn.q_proj(h).view(shape), attn.k_proj(h).view(shape)  # [B, 1, heads, D]
            if qk_norm is not None:
                q, k = qk_norm[0](q), qk_norm[1](k)
            qk = torch.cat((q, k), 2)
            qk = qk * cos + qk.roll(half, -1) * sin
            q, k = qk[:, :, :q.shape[2]].transpose(1, 2), qk[:, :, q.shape[2]:].transpose(1, 2)
            keys, values = kv.update(k, attn.v_proj(h).view(shape).transpose(1, 2))
            out = grouped_attention(q, keys, values, mask, attn.scaling,
                                    attn.attention_dropout if attn.training else 0.0)
            x = x + attn.o_proj(out.reshape(batch, 1, -1))
            mlp, h = layer.mlp, post(x)
            x = x + mlp.down_proj(mlp.act_fn(mlp.gate_proj(h)) * mlp.up_proj(h))
        return self.model.lm_head(self.final_norm(x))[:, -1]
