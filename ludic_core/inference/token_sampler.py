"""Per-row token sampling that reports log-probs of the distribution used.

One convention across backends and the trainer: a sampled token's log-prob is
taken under the distribution it was actually drawn from (logits / temperature,
then top-p truncation and renormalisation). Greedy rows (temperature 0) report
the unscaled (temperature 1) log-prob, as vLLM does.

Each row has its own `torch.Generator`, so a request's sample depends on its
own seed only, not on which other requests shared its batch.
"""

from __future__ import annotations

import torch

__all__ = ["sampling_logprobs", "sample_tokens"]


def sampling_logprobs(logits: torch.Tensor, temperature: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Log-probs [B, V] of the sampling distribution for each row.

    logits: [B, V] (any float dtype; computed in fp32). temperature, top_p: [B].
    Rows with temperature 0 use temperature 1 (see module docstring).
    """
    logits = logits.float()
    temp = torch.where(temperature > 0, temperature, torch.ones_like(temperature))
    logp = torch.log_softmax(logits / temp.unsqueeze(-1), dim=-1)
    if bool((top_p < 1.0).any()):
        logp = _apply_top_p(logp, top_p)
    return logp


def _apply_top_p(logp: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Keep the smallest set of tokens whose mass reaches top_p; renormalise."""
    sorted_logp, order = torch.sort(logp, dim=-1, descending=True)
    cum = sorted_logp.exp().cumsum(dim=-1)
    # A token is dropped when the mass *before* it already reaches top_p;
    # the most likely token is therefore always kept.
    drop_sorted = (cum - sorted_logp.exp()) >= top_p.unsqueeze(-1)
    drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
    masked = logp.masked_fill(drop, float("-inf"))
    return torch.log_softmax(masked, dim=-1)


def sample_tokens(
    logits: torch.Tensor,
    temperature: torch.Tensor,
    top_p: torch.Tensor,
    generators: list[torch.Generator],
) -> tuple[torch.Tensor, torch.Tensor]:
    """Draw one token per row; return (token ids [B], their log-probs [B]).

    Uses the Gumbel-max trick with per-row uniform noise, which samples exactly
    from softmax(logp) while letting every row use its own generator.
    """
    logp = sampling_logprobs(logits, temperature, top_p)
    batch, vocab = logp.shape
    noise = torch.stack([torch.rand(vocab, generator=g) for g in generators])
    gumbel = -torch.log(-torch.log(noise.clamp_min(1e-20)))
    sampled = torch.argmax(logp + gumbel, dim=-1)
    greedy = torch.argmax(logits, dim=-1)
    tokens = torch.where(temperature > 0, sampled, greedy)
    chosen = logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return tokens, chosen
