"""`SharedPrefix`: a micro-batch's rows that open with the same prompt run that prompt once.

A GRPO group is G completions of one prompt. Scored row by row, the prompt's positions run
G times forward and G times backward, and on a short-answer task they are most of the
micro-batch (the one-move tic-tac-toe task: 59 prompt tokens before 15 completion tokens).
Here each distinct prompt runs once, its keys and values are handed to its rows as a KV
cache, and only the completions run per row; the backward sums every row's gradient into
the one prompt pass, so the gradient is the unshared one (to float rounding).

A row's prompt is everything before its first action token (the positions whose hidden
states are never scored, except the last, which predicts the first action token). Rows
are grouped by identical prompts; prompts are right-padded to the longest, completions
too, and each completion attends to its own prompt's columns only.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

__all__ = ["SharedPrefix", "plan_shared_prefix"]


@dataclass(frozen=True)
class SharedPrefix:
    """Host tensors for one micro-batch of R rows over G distinct prompts (P columns) and
    completions of up to S tokens."""

    prefix_ids: torch.Tensor  # [G, P] prompts, right-padded
    prefix_mask: torch.Tensor  # [G, P]
    row_prompt: torch.Tensor  # [R] the prompt each row opens with
    suffix_ids: torch.Tensor  # [R, S] each row after its prompt, right-padded
    suffix_mask: torch.Tensor  # [R, P + S] the prompt's real columns, then the row's own
    suffix_positions: torch.Tensor  # [R, S] positions in the whole row
    gather: torch.Tensor  # [R, T - start] into [prompt hidden (G*P); suffix hidden (R*S); a zero row]
    saved_positions: int  # prompt positions not computed


def plan_shared_prefix(input_ids: torch.Tensor, attention_mask: torch.Tensor, action_mask: torch.Tensor,
                       start: int, *, pad_id: int, min_saved: int) -> SharedPrefix | None:
    """The shared-prompt layout of a right-padded micro-batch, or None where it saves fewer than
    `min_saved` positions (a forward's fixed cost), a row has no action token or a row's mask has
    a hole.

    `start`: the first position whose hidden state is scored (the caller's; every row's prompt
    reaches at least one past it)."""
    rows, width = input_ids.shape
    acting = action_mask > 0
    if not bool(acting.any(1).all()) or not torch.equal(attention_mask.cumprod(1), attention_mask):
        return None  # a row without actions, or one not right-padded
    first = acting.int().argmax(1).tolist()  # each row's first action token
    lengths = attention_mask.sum(1).tolist()
    ids = input_ids.tolist()
    prompts: dict[tuple[int, ...], int] = {}
    row_prompt = [prompts.setdefault(tuple(ids[r][:first[r]]), len(prompts)) for r in range(rows)]
    keys = list(prompts)
    if any(len(k) == 0 for k in keys):
        return None
    per_prompt = [0] * len(keys)
    for g in row_prompt:
        per_prompt[g] += 1
    saved = sum((n - 1) * len(k) for n, k in zip(per_prompt, keys))
    if saved < min_saved:
        return None
    p_width = max(len(k) for k in keys)
    s_width = max(int(lengths[r]) - first[r] for r in range(rows))
    prefix_ids = torch.full((len(keys), p_width), pad_id, dtype=torch.long)
    prefix_mask = torch.zeros((len(keys), p_width), dtype=torch.long)
    for g, k in enumerate(keys):
        prefix_ids[g, :len(k)] = torch.tensor(k)
        prefix_mask[g, :len(k)] = 1
    suffix_ids = torch.full((rows, s_width), pad_id, dtype=torch.long)
    suffix_mask = torch.zeros((rows, p_width + s_width), dtype=torch.long)
    positions = torch.zeros((rows, s_width), dtype=torch.long)
    zero = len(keys) * p_width + rows * s_width  # the zero row of the gather's source
    gather = torch.full((rows, width - start), zero, dtype=torch.long)
    for r in range(rows):
        g, p, n = row_prompt[r], first[r], int(lengths[r]) - first[r]
        suffix_ids[r, :n] = input_ids[r, p:p + n]
        suffix_mask[r, :p] = 1
        suffix_mask[r, p_width:p_width + n] = 1
        positions[r] = torch.arange(p, p + s_width)
        # the prompt's last position predicts the first action token; the row's own follow it
        gather[r, p - 1 - start] = g * p_width + p - 1
        gather[r, p - start:p - start + n] = len(keys) * p_width + r * s_width + torch.arange(n)
    return SharedPrefix(prefix_ids, prefix_mask, torch.tensor(row_prompt), suffix_ids, suffix_mask, positions,
                        gather, saved)
