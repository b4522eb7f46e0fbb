"""`token_logprobs`: per-token log-probs of a sequence under the model.

The trainer's one place where logits become the `LossInputs.logprobs` tensor.
Always fp32: bf16 log-probs are coarse enough (~3 significant digits) to put
visible noise into exp(logprobs - old_logprobs) ratios.

Why a hand-written autograd function: the plain `log_softmax(logits.float())
.gather(...)` keeps an fp32 [tokens, vocab] log-softmax for backward and makes
fp32 copies besides; at a 151,936-token vocabulary and a 32k-token micro-batch
each such buffer is 20 GB. Here the forward saves only the logits (in their own
dtype, bf16 under autocast) and one log-normaliser per position; both passes
walk the positions in chunks, so the fp32 work buffer is chunk x vocab. The
temperature (ratio losses score the distribution the actor sampled from) is
folded in, so no scaled copy of the logits is made either.
"""

from __future__ import annotations

import torch

__all__ = ["token_logprobs", "DEFAULT_CHUNK_TOKENS"]

DEFAULT_CHUNK_TOKENS = 4096


class _ChunkedTokenLogprob(torch.autograd.Function):
    """log softmax(z * inv_temp)[target] over rows of z [N, V], chunk by chunk."""

    @staticmethod
    def forward(ctx, logits, targets, inv_temp, chunk: int):
        n = logits.shape[0]
        out = torch.empty(n, dtype=torch.float32, device=logits.device)
        lse = torch.empty(n, dtype=torch.float32, device=logits.device)
        for s in range(0, n, chunk):
            z = _scaled(logits[s:s + chunk], inv_temp, s, chunk, fresh=False)
            lse[s:s + chunk] = torch.logsumexp(z, dim=-1)
            out[s:s + chunk] = z.gather(-1, targets[s:s + chunk, None]).squeeze(-1) - lse[s:s + chunk]
        ctx.save_for_backward(logits, targets, lse, inv_temp)
        ctx.chunk = chunk
        return out

    @staticmethod
    def backward(ctx, grad_out):
        logits, targets, lse, inv_temp = ctx.saved_tensors
        chunk = ctx.chunk
        grad = torch.empty_like(logits)
        grad_out = grad_out.float()
        for s in range(0, logits.shape[0], chunk):
            g_out = grad_out[s:s + chunk, None]
            # d/dz log softmax(z/T)[k] = (onehot(k) - softmax(z/T)) / T
            g = _scaled(logits[s:s + chunk], inv_temp, s, chunk)
            g.sub_(lse[s:s + chunk, None]).exp_().mul_(-g_out)
            g.scatter_add_(-1, targets[s:s + chunk, None], g_out)
            if inv_temp.numel():
                g.mul_(inv_temp[s:s + chunk, None])
            grad[s:s + chunk] = g
        return grad, None, None, None


def _scaled(z: torch.Tensor, inv_temp: torch.Tensor, start: int, chunk: int, fresh: bool = True) -> torch.Tensor:
    """The chunk in fp32, times its rows' 1/T when temperatures are given; a new
    tensor when `fresh` (the backward pass works in place on it)."""
    if inv_temp.numel():
        return z.float() * inv_temp[start:start + chunk, None]
    return z.to(torch.float32, copy=fresh)


def inverse_temperatures(temperatures: torch.Tensor | None, batch: int, width: int,
                         device: torch.device) -> torch.Tensor:
    """1/T for each of batch x width positions, flattened; empty when `temperatures` is None.
    `temperatures` is [B] (one per row) or [B, T] (one per position, for packed rows)."""
    if temperatures is None:
        return torch.empty(0, device=device)
    inv = 1.0 / temperatures.to(device, torch.float32)
    if inv.dim() == 1:
        inv = inv[:, None]
    return inv.expand(batch, width).reshape(-1)


def token_logprobs(
    logits: torch.Tensor,
    input_ids: torch.Tensor,
    *,
    temperatures: torch.Tensor | None = None,
    chunk_tokens: int = DEFAULT_CHUNK_TOKENS,
) -> torch.Tensor:
    """logits [B, T, V], input_ids [B, T] -> [B, T-1] fp32, where position t holds
    log softmax(logits[:, t] / temperature)[input_ids[:, t+1]] (the score of the next token).

    temperatures: [B], one per row, or [B, T], one per position (packed rows); None = 1. `chunk_tokens` positions are
    processed at a time; values and gradients do not depend on it.
    """
    if logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match input_ids {tuple(input_ids.shape)}"
        )
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    batch, width, vocab = logits.shape
    # Score every position (the last against a dummy target, then dropped) so the
    # flattening below is a view of the logits, not a copy.
    targets = torch.zeros_like(input_ids, dtype=torch.long)
    targets[:, :-1] = input_ids[:, 1:]
    inv_temp = inverse_temperatures(temperatures, batch, width, logits.device)
    flat = _ChunkedTokenLogprob.apply(logits.reshape(batch * width, vocab), targets.reshape(-1), inv_temp,
                                      chunk_tokens)
    return flat.view(batch, width)[:, :-1]
