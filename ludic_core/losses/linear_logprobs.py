"""`linear_token_logprobs`: token log-probs straight from hidden states, never the logits.

The policy's log-prob of a token is log softmax(h W^T + b)[token]. Materialising
the logits first costs tokens x vocab memory twice (the logits kept for
backward, then their gradient): at a 151,936-token vocabulary and a 32k-token
micro-batch that is 10 GB each in bf16. This autograd function projects a
chunk of positions at a time, keeps only one log-normaliser per position, and
recomputes each chunk's logits in backward (one extra [chunk, H] x [H, V]
matmul, ~1/3 of the output layer's FLOPs) to form the gradients of the hidden
states and of W. Peak memory is then chunk x vocab, whatever the micro-batch.

The matmuls run in `compute_dtype` (bf16 under the trainer's autocast, as the
model's own lm_head would); softmax, log-normaliser and gradients of the
logits in fp32, like `token_logprobs`.

On a GPU with a bf16 `compute_dtype` the per-chunk softmax work runs as compiled
functions (`_FUSED`): each reads the chunk's bf16 logits once instead of making
fp32 copies and passing over them five times (a [4096, 151,936] chunk is 2.5 GB
in fp32). Same numbers: the logits are the bf16 matmul's output either way. A
compile that fails falls back to the eager code, once and for all.
"""

from __future__ import annotations

import logging

import torch

from ludic_core.losses.logprobs import inverse_temperatures

__all__ = ["linear_token_logprobs"]

log = logging.getLogger(__name__)


def _chunk_logprobs(z: torch.Tensor, targets: torch.Tensor, inv_temp: torch.Tensor | None):
    """(log-prob of each row's target, log-normaliser) of a chunk's logits z [n, V]."""
    zf = z.float() if inv_temp is None else z.float() * inv_temp[:, None]
    lse = torch.logsumexp(zf, dim=-1)
    return zf.gather(-1, targets[:, None]).squeeze(-1) - lse, lse


def _chunk_grad(z: torch.Tensor, lse: torch.Tensor, targets: torch.Tensor, g_out: torch.Tensor,
                inv_temp: torch.Tensor | None) -> torch.Tensor:
    """d/dz of g_out * log softmax(z/T)[target] = g_out * (onehot(target) - softmax(z/T)) / T, in z's dtype."""
    zf = z.float() if inv_temp is None else z.float() * inv_temp[:, None]
    onehot = torch.arange(z.shape[-1], device=z.device)[None, :] == targets[:, None]
    g = (onehot.float() - torch.exp(zf - lse[:, None])) * g_out[:, None]
    return (g if inv_temp is None else g * inv_temp[:, None]).to(z.dtype)


class _Fused:
    """`_chunk_logprobs` and `_chunk_grad` compiled (dynamic shapes) on first use; eager after a failure."""

    def __init__(self) -> None:
        self.fns: dict[str, object] = {}
        self.failed = False

    def __call__(self, name: str, fn, *args):
        if self.failed:
            return fn(*args)
        compiled = self.fns.get(name)
        if compiled is None:
            compiled = self.fns[name] = torch.compile(fn, dynamic=True)
        try:
            return compiled(*args)
        except torch.cuda.OutOfMemoryError:
            raise  # the eager code needs more memory, not less
        except Exception as exc:  # no compiler, an unsupported op...: the eager code from now on
            log.warning("output-layer softmax not compiled (%s: %s); running it eagerly", type(exc).__name__, exc)
            self.failed = True
            return fn(*args)


_FUSED = _Fused()


def _fuses(hidden: torch.Tensor, compute_dtype: torch.dtype, bias: torch.Tensor | None) -> bool:
    return hidden.is_cuda and compute_dtype != torch.float32 and bias is None


class _LinearTokenLogprob(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, inv_temp, chunk: int, compute_dtype):
        n = hidden.shape[0]
        w = weight.to(compute_dtype)
        out = torch.empty(n, dtype=torch.float32, device=hidden.device)
        lse = torch.empty(n, dtype=torch.float32, device=hidden.device)
        fused = _fuses(hidden, compute_dtype, bias)
        for s in range(0, n, chunk):
            temp = inv_temp[s:s + chunk] if inv_temp.numel() else None
            if fused:
                z = torch.nn.functional.linear(hidden[s:s + chunk].to(w.dtype), w)
                out[s:s + chunk], lse[s:s + chunk] = _FUSED("logprobs", _chunk_logprobs, z, targets[s:s + chunk], temp)
                continue
            z = _logits(hidden[s:s + chunk], w, bias, temp)
            lse[s:s + chunk] = torch.logsumexp(z, dim=-1)
            out[s:s + chunk] = z.gather(-1, targets[s:s + chunk, None]).squeeze(-1) - lse[s:s + chunk]
        ctx.save_for_backward(hidden, weight, bias, targets, lse, inv_temp)
        ctx.chunk, ctx.compute_dtype = chunk, compute_dtype
        return out

    @staticmethod
    def backward(ctx, grad_out):
        hidden, weight, bias, targets, lse, inv_temp = ctx.saved_tensors
        need_h, need_w, need_b = ctx.needs_input_grad[:3]
        cd, chunk = ctx.compute_dtype, ctx.chunk
        w = weight.to(cd)
        grad_h = torch.empty_like(hidden) if need_h else None
        grad_w = torch.zeros(weight.shape, dtype=torch.float32, device=weight.device) if need_w else None
        grad_b = torch.zeros(weight.shape[0], dtype=torch.float32, device=weight.device) if need_b else None
        grad_out = grad_out.float()
        fused = _fuses(hidden, cd, bias)
        for s in range(0, hidden.shape[0], chunk):
            temp = inv_temp[s:s + chunk, None] if inv_temp.numel() else None
            g_out = grad_out[s:s + chunk, None]
            if fused:
                z = torch.nn.functional.linear(hidden[s:s + chunk].to(cd), w)
                g = _FUSED("grad", _chunk_grad, z, lse[s:s + chunk], targets[s:s + chunk], g_out[:, 0],
                           temp[:, 0] if temp is not None else None)
            else:
                # d/dz log softmax(z/T)[k] = (onehot(k) - softmax(z/T)) / T
                g = _logits(hidden[s:s + chunk], w, bias, temp[:, 0] if temp is not None else None)
                g.sub_(lse[s:s + chunk, None]).exp_().mul_(-g_out)
                g.scatter_add_(-1, targets[s:s + chunk, None], g_out)
                if temp is not None:
                    g.mul_(temp)
                if need_b:
                    grad_b += g.sum(0)
                g = g.to(cd)
            if need_h:
                grad_h[s:s + chunk] = g @ w
            if need_w:  # accumulated into fp32 as it is added: no fp32 copy of the [V, H] product
                grad_w += g.T @ hidden[s:s + chunk].to(cd)
        return (grad_h, _like(grad_w, weight), _like(grad_b, bias), None, None, None, None)


def _logits(h: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None, inv_temp: torch.Tensor | None) -> torch.Tensor:
    """fp32 logits of a chunk (a fresh tensor: backward works on it in place)."""
    z = torch.nn.functional.linear(h.to(w.dtype), w, bias.to(w.dtype) if bias is not None else None).float()
    if inv_temp is not None:
        z.mul_(inv_temp[:, None])
    return z


def _like(grad: torch.Tensor | None, param: torch.Tensor | None) -> torch.Tensor | None:
    return None if grad is None or param is None else grad.to(param.dtype)


def linear_token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    input_ids: torch.Tensor,
    *,
    temperatures: torch.Tensor | None = None,
    chunk_tokens: int = 4096,
    compute_dtype: torch.dtype = torch.float32,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """hidden [B, T, H] (the decoder's output), weight [V, H], input_ids [B, T] -> [B, T-1] fp32,
    where position t holds log softmax((hidden[:, t] W^T + b) / temperature)[input_ids[:, t+1]].

    Same numbers as `token_logprobs(lm_head(hidden), input_ids, ...)` to float tolerance.
    temperatures: [B], one per row, or [B, T], one per position (None = 1).
    positions: indices into the flattened [B, T] grid of the only positions to score (a
    trainer's action tokens: the output layer is a third of a small model's FLOPs, and
    prompts, observations and padding need none of it); the others read 0.
    """
    if hidden.shape[:2] != input_ids.shape:
        raise ValueError(f"hidden {tuple(hidden.shape)} does not match input_ids {tuple(input_ids.shape)}")
    if chunk_tokens < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    batch, width, size = hidden.shape
    targets = torch.zeros_like(input_ids, dtype=torch.long)
    targets[:, :-1] = input_ids[:, 1:]  # the last position gets a dummy target, dropped below
    inv_temp = inverse_temperatures(temperatures, batch, width, hidden.device)
    hidden, targets = hidden.reshape(batch * width, size), targets.reshape(-1)
    if positions is None:
        flat = _LinearTokenLogprob.apply(hidden, weight, bias, targets, inv_temp, chunk_tokens, compute_dtype)
    else:
        picked = _LinearTokenLogprob.apply(hidden.index_select(0, positions), weight, bias,
                                           targets.index_select(0, positions),
                                           inv_temp.index_select(0, positions) if inv_temp.numel() else inv_temp,
                                           chunk_tokens, compute_dtype)
        flat = picked.new_zeros(batch * width).index_copy(0, positions, picked)
    return flat.view(batch, width)[:, :-1]
