"""`token_logprobs`: per-token log-probs of a sequence under the model.

The trainer's one place where logits become the `LossInputs.logprobs` tensor.
Always fp32: bf16 log-probs are coarse enough (~3 significant digits) to put
visible noise into exp(logprobs - old_logprobs) ratios.
"""

from __future__ import annotations

import torch

__all__ = ["token_logprobs"]


def token_logprobs(logits: torch.Tensor, input_ids: torch.Tensor) -> torch.Tensor:
    """logits [B, T, V], input_ids [B, T] -> [B, T-1] where position t holds
    log softmax(logits[:, t])[input_ids[:, t+1]] (the score of the next token)."""
    if logits.shape[:2] != input_ids.shape:
        raise ValueError(
            f"logits {tuple(logits.shape)} do not match input_ids {tuple(input_ids.shape)}"
        )
    logp = torch.log_softmax(logits[:, :-1].float(), dim=-1)
    return logp.gather(-1, input_ids[:, 1:, None].long()).squeeze(-1)
