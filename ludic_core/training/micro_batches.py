"""`MicroBatcher`: one step's items -> this rank's micro-batches, packed or padded.

A layout decision, kept out of the optimisation loop (`Trainer`): packed rows
(document-masked through `position_ids`) or length-sorted padding, whichever
computes fewer positions; a once-per-run check that the model really keeps
packed items apart (else padding from then on); and every FSDP rank running the
same number of forward/backward passes (padded out with zero-weight copies).

Padded rows are right-padded, so a causal model's real positions never see a
pad: they can run with no attention mask at all, which lets SDPA use its flash
kernel (a padding mask forces the slower masked kernels). Whether the model
really is causal without a mask is checked once per run (`causal`).
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import torch

from ludic_core.batching.collate import MicroBatch, collate_micro_batches
from ludic_core.batching.packing import pack_micro_batches, unpack
from ludic_core.batching.saw import SAWItem
from ludic_core.device import forward_cost_tokens
from ludic_core.training import distributed as dist_utils
from ludic_core.training.shared_prefix import SharedPrefix, plan_shared_prefix

__all__ = ["MicroBatcher", "is_pad", "to_device"]

log = logging.getLogger(__name__)

class MicroBatcher:
    """Splits a step's items into micro-batches of at most `micro_token_budget` tokens.

    `scorer` (the trainer's `PolicyScorer`) is used once by each check (packing, shared prompts).
    """

    def __init__(self, *, micro_token_budget: int, pad_id: int, packing: bool, scorer: Any,
                 ctx: dist_utils.DistContext, compute_dtype: torch.dtype, share_prompts: bool = False) -> None:
        self.budget, self.pad_id = micro_token_budget, pad_id
        self.packing = packing  # switched off if the model does not honour packed rows
        self.share_prompts = share_prompts  # switched off if shared prompts score differently
        self._sharing_checked = False
        self.scorer, self.ctx, self.compute_dtype = scorer, ctx, compute_dtype
        self.forward_cost = forward_cost_tokens(ctx.device)  # what length-sorted cutting trades padding against
        self._packing_checked = False
        self.causal: bool | None = None  # padded rows run without a mask (None: not yet checked)

    def split(self, items: list[SAWItem]) -> list[MicroBatch]:
        """This rank's share of `items`, as micro-batches (the same number on every rank)."""
        mine = dist_utils.shard_batch(items, self.ctx)
        mbs = self._collate(mine) if mine else []
        # FSDP ranks must run the same number of forward/backward passes.
        target = _all_reduce_max(len(mbs), self.ctx)
        while len(mbs) < target:
            template = mbs[-1] if mbs else self._collate(items[:1])[0]
            mbs.append(_zero_weight_copy(template))
        if (self.packing and not self._packing_checked and mbs and mbs[0].packed is not None
                and not self._packing_holds(mbs[0])):
            return self.split(items)  # now padded
        if self.causal is None and target:  # every rank has a micro-batch: all check together
            self.causal = self._causal_without_mask(mbs[0])
        return mbs

    def attention_mask(self, mb: MicroBatch) -> torch.Tensor | None:
        """The mask a padded micro-batch runs with: none once the model proved causal without one."""
        return None if self.causal else to_device(mb.attention_mask, self.ctx.device)

    def shared_prompts(self, mb: MicroBatch, start: int) -> SharedPrefix | None:
        """The layout that runs each prompt of a padded micro-batch once (`shared_prefix`), on the
        device, where it saves more than a forward's fixed cost; checked once per run against the
        rows scored whole, and given up (with a warning) if the two differ."""
        if not self.share_prompts or mb.packed is not None or is_pad(mb) or not self.scorer.can_share:
            return None
        plan = plan_shared_prefix(mb.input_ids, mb.attention_mask, mb.action_mask, start, pad_id=self.pad_id,
                                  min_saved=self.forward_cost)
        if plan is None:
            return None
        moved: dict[str, Any] = {f.name: to_device(getattr(plan, f.name), self.ctx.device)
                                 for f in dataclasses.fields(plan) if f.name != "saved_positions"}
        plan = dataclasses.replace(plan, **moved)
        if not self._sharing_checked:
            self._sharing_checked = True
            self.share_prompts = self._sharing_holds(mb, plan, start)
            if not self.share_prompts:
                return None
        return plan

    def _sharing_holds(self, mb: MicroBatch, plan: SharedPrefix, start: int) -> bool:
        device = self.ctx.device
        ids = to_device(mb.input_ids, device)
        name = type(self.scorer.model).__name__
        with torch.no_grad():
            whole, _ = self.scorer(ids, to_device(mb.attention_mask, device), start, None, False)
            try:
                shared, _ = self.scorer.shared_prefix_logprobs(plan, ids, start, None, False, None)
            except Exception as exc:  # a model whose forward or cache does not work this way
                log.warning("%s cannot run a shared prompt once (%s: %s); scoring every row whole",
                            name, type(exc).__name__, exc)
                return False
        acting = to_device(mb.action_mask[:, start + 1:], device) > 0
        diff = float((whole - shared).abs()[acting].max()) if bool(acting.any()) else 0.0
        if diff > self._tolerance():
            log.warning("%s scores rows differently when their shared prompt runs once (by %.3g); scoring "
                        "every row whole", name, diff)
            return False
        return True

    def _collate(self, items: list[SAWItem]) -> list[MicroBatch]:
        """Packed or padded micro-batches, whichever computes fewer positions (each
        micro-batch counted with a forward's fixed cost): items too long to share rows
        pack no better than length-sorted padding, and then padding is kept."""
        padded = collate_micro_batches(items, micro_token_budget=self.budget, pad_id=self.pad_id,
                                       batch_overhead_tokens=self.forward_cost)
        if not self.packing:
            return padded
        packed = pack_micro_batches(items, micro_token_budget=self.budget, pad_id=self.pad_id)
        cost = self.forward_cost
        return packed if _positions(packed, cost) < _positions(padded, cost) else padded

    def _tolerance(self) -> float:
        """How far two layouts' log-probs may differ and still count as the same (the checks)."""
        return 1e-3 if self.compute_dtype == torch.float32 else 5e-2

    def _causal_without_mask(self, mb: MicroBatch) -> bool:
        """Once per run, on every rank: do padded rows score the same with no attention mask?
        A causal LM's real positions only see earlier ones, and pads come last; a model that
        attends both ways without a mask (or reads positions from it) fails, and keeps its mask."""
        device, rows = self.ctx.device, slice(0, 8)  # a few rows decide it (packed ones keep this layout too)
        ids, mask = to_device(mb.input_ids[rows], device), to_device(mb.attention_mask[rows], device)
        with torch.no_grad():
            masked, _ = self.scorer(ids, mask, 0, None, False)
            bare, _ = self.scorer(ids, None, 0, None, False)
        real = mask[:, 1:].bool()
        diff = (masked - bare).abs()[real].max() if bool(real.any()) else masked.new_zeros(())
        fails = dist_utils.all_reduce_floats([float(diff > self._tolerance())], "sum", self.ctx)[0]
        if fails:
            log.warning("%s scores padded rows differently without an attention mask (by %.3g); keeping the "
                        "mask", type(self.scorer.model).__name__, float(diff))
        return not fails

    def _packing_holds(self, mb: MicroBatch) -> bool:
        """Once per run, on every rank: do the packed rows give each item the log-probs
        of its own padded row? A model that ignores `position_ids` restarts (and so lets
        items attend to each other) fails this, and the trainer pads from then on. The
        check is conclusive once some rank has a row holding two or more items."""
        rows = mb.packed
        assert rows is not None  # asked of packed micro-batches only
        step = rows.input_ids.shape[1] - 1  # each row's share of the flattened index
        row_of = (rows.index[:, 0] // step).tolist() if step > 0 else []
        row = max(set(row_of), key=row_of.count) if row_of else 0  # the row holding the most items
        members = [b for b, r in enumerate(row_of) if r == row]
        fail, conclusive = 0.0, float(len(members) > 1)
        if conclusive:
            device = self.ctx.device
            with torch.no_grad():
                packed, _ = self.scorer(to_device(rows.input_ids[row:row + 1], device), None, 0, None, False,
                                        position_ids=to_device(rows.position_ids[row:row + 1], device))
                padded, _ = self.scorer(to_device(mb.input_ids[members], device),
                                        to_device(mb.attention_mask[members], device), 0, None, False)
            mask = to_device(mb.attention_mask[members, 1:], device).bool()
            diff = (unpack(packed, to_device(rows.index[members] - row * step, device)) - padded).abs()[mask].max()
            fail = float(diff > self._tolerance())
            if fail:
                log.warning("%s does not keep packed items apart (log-probs differ by %.3g); "
                            "training on padded micro-batches", type(self.scorer.model).__name__, float(diff))
        fails, conclusives = dist_utils.all_reduce_floats([fail, conclusive], "sum", self.ctx)
        if fails:
            self.packing = False
        self._packing_checked = bool(fails or conclusives)
        return not fails


def is_pad(mb: MicroBatch) -> bool:
    """A zero-weight copy that only keeps FSDP ranks in lock-step (not real data)."""
    return bool(mb.meta) and bool(mb.meta[0].get("_pad"))


def to_device(t: torch.Tensor, device: torch.device) -> torch.Tensor:
    """`t` on `device` without the host waiting: a plain copy from pageable host memory
    first waits for everything queued on the GPU (the last micro-batch's backward)."""
    if device.type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def _all_reduce_max(n: int, ctx: dist_utils.DistContext) -> int:
    if not ctx.is_distributed:
        return n
    import torch.distributed as dist

    t = torch.tensor([n], dtype=torch.long, device=ctx.device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return int(t.item())


def _positions(mbs: list[MicroBatch], per_forward: int) -> int:
    """What a list of micro-batches costs: positions computed, plus a forward's fixed
    cost (the token equivalent `collate_micro_batches` cuts by)."""
    return sum(mb.padded_tokens + per_forward for mb in mbs)



def _zero_weight_copy(mb: MicroBatch) -> MicroBatch:
    """A micro-batch that contributes nothing (keeps FSDP ranks in lock-step)."""
    return MicroBatch(mb.input_ids, mb.attention_mask, torch.zeros_like(mb.action_mask),
                      mb.actor_logprobs, torch.zeros_like(mb.weights), [{"_pad": True}],
                      mb.temperatures, mb.packed, mb.teacher_logprobs, mb.teacher_top_ids, mb.teacher_top_logprobs)
