"""How a micro-batch is scored, by its layout: padded rows or packed ones.

`Trainer._forward_loss` asks for the log-probs (and entropies) of a micro-batch's action
positions from `start` on, once from the policy and once from a KL reference; both
layouts here answer in the padded layout of the action mask and actor log-probs, and
work out what the host must decide (which positions act, whether prompts are shared)
once for both scorers.
"""

from __future__ import annotations

from typing import Any

import torch

from ludic_core.batching.collate import MicroBatch
from ludic_core.batching.packing import unpack
from ludic_core.training.micro_batches import MicroBatcher, to_device
from ludic_core.training.scoring import TokenScores

__all__ = ["PackedScoring", "PaddedScoring"]


class PaddedScoring:
    """Right-padded rows; rows that open with the same prompt run it once where the batcher
    lays them out so (`shared_positions`: the prompt positions that saved)."""

    def __init__(self, mb: MicroBatch, batcher: MicroBatcher, device: torch.device,
                 temps: torch.Tensor | None) -> None:
        self.mb, self.batcher, self.device, self.temps = mb, batcher, device, temps
        self.ids, self.attention = to_device(mb.input_ids, device), batcher.attention_mask(mb)
        self.found: dict[int, tuple[torch.Tensor, Any]] = {}  # by start: the policy and a KL reference share them
        self.shared_positions = 0

    def __call__(self, scorer: Any, start: int, need_entropy: bool,
                 top_ids: torch.Tensor | None = None) -> TokenScores:
        """`PolicyScorer.score`'s scores of the micro-batch (with `top_ids`, of those ids too)."""
        mb = self.mb
        if start not in self.found:  # only the action tokens' positions are scored (found on the host: no sync)
            at = torch.zeros(mb.input_ids[:, start:].shape, dtype=torch.bool)
            at[:, :-1] = mb.action_mask[:, start + 1:] > 0
            plan = self.batcher.shared_prompts(mb, start)  # a GRPO group's prompt runs once
            if plan is not None:
                self.shared_positions += plan.saved_positions
            self.found[start] = (to_device(at.flatten().nonzero().squeeze(1), self.device), plan)
        positions, plan = self.found[start]
        if plan is not None and scorer.can_share:
            return scorer.shared_prefix_scores(plan, self.ids, start, self.temps, need_entropy, positions, top_ids)
        return scorer.score(self.ids, self.attention, start, self.temps, need_entropy, positions=positions,
                            top_ids=top_ids)


class PackedScoring:
    """Packed rows scored whole, then each item's values laid out in its own row (the layout of
    the action mask and actor log-probs), what precedes `start` dropped."""

    shared_positions = 0

    def __init__(self, mb: MicroBatch, device: torch.device, tempered: bool) -> None:
        rows = mb.packed
        assert rows is not None  # built for packed micro-batches only
        self.ids, self.pos = to_device(rows.input_ids, device), to_device(rows.position_ids, device)
        self.index = to_device(rows.index, device)
        self.temps = to_device(rows.temperatures, device) if tempered else None

    def __call__(self, scorer: Any, start: int, need_entropy: bool,
                 top_ids: torch.Tensor | None = None) -> TokenScores:
        if top_ids is not None:  # the trainer refuses packing with such a loss; this says why if it is reached
            raise ValueError("top-k distillation scores padded rows only: set trainer.packing false")
        logprobs, entropy = scorer(self.ids, None, 0, self.temps, need_entropy, position_ids=self.pos)
        return TokenScores(unpack(logprobs, self.index)[:, start:],
                           unpack(entropy, self.index)[:, start:] if entropy is not None else None)
