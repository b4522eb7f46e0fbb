"""`Trainer`: a deliberately dumb optimisation loop.

Everything algorithmic lives in the credit assigner and the loss; the trainer
only turns SAW batches into optimizer steps: stale-item filtering, token-budget
micro-batching, one forward per micro-batch shared by all loss terms, gradient
accumulation normalised by whole-step totals (so 1 process or N, 1 micro-batch
or 10, give the same gradient), clipping, the LR schedule, publishing,
checkpoints and logs. The same code runs single-process and under torchrun
with FSDP2 (gradient sync only on the last micro-batch; rank 0 publishes).

Two habits keep a step cheap without changing its gradient. Items whose weight
is 0 under a loss that declares itself inert there (`Loss`) are never scored,
but still count in the step totals. And nothing in the micro-batch loop waits
for the accelerator: metrics stay on the device and are read once per step.
"""

from __future__ import annotations

import logging
import math
import random
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.batching.collate import MicroBatch, padding_waste
from ludic_core.batching.saw import SAWBatch, SAWItem, is_stale
from ludic_core.batching.sources import BatchSource, as_batch_source
from ludic_core.config import TrainerConfig, check_max_lag
from ludic_core.device import resolve_dtype
from ludic_core.logging.loggers import Logger
from ludic_core.lora.peft_model import adapter_config, adapter_state_dict, is_lora, merged_state_dict
from ludic_core.losses import LossInputs, is_inert
from ludic_core.publish.base import PolicyPublisher, as_policy_publisher
from ludic_core.training import distributed as dist_utils
from ludic_core.training.checkpoint import load_checkpoint, save_checkpoint
from ludic_core.training.checkpoint_integrity import candidates
from ludic_core.training.micro_batch_scoring import PackedScoring, PaddedScoring
from ludic_core.training.micro_batches import MicroBatcher, is_pad, to_device
from ludic_core.training.model_setup import pad_id, prepare_model
from ludic_core.training.rollout_reuse import merge_update_metrics, plan_updates
from ludic_core.training.schedules import lr_multiplier
from ludic_core.training.scoring import PolicyScorer
from ludic_core.training.step_metrics import StepMetrics
from ludic_core.training.teacher import Teacher, with_teacher_logprobs

__all__ = ["Trainer"]

log = logging.getLogger(__name__)


class Trainer:
    """`model` is a transformers causal LM (`tokenizer` its tokenizer), left `Any`: the trainer
    reads its `config` and calls what transformers names. `source` and `publisher` may be any
    objects with the required methods of `BatchSource` / `PolicyPublisher`: hooks they lack
    take the Protocols' defaults (`as_batch_source`, `as_policy_publisher`), and a missing
    required method is a TypeError naming it. `source=None` builds a trainer that only
    scores or publishes (reading a batch is then a ValueError). `teacher` scores every item for
    a loss that reads a distillation teacher's log-probs (`training/teacher.py`), once per
    train step, whatever the rollout reuse; under torchrun each rank scores its share and all get all."""

    def __init__(
        self,
        model: Any,
        algorithm: RLAlgorithm,
        source: BatchSource | None,
        config: TrainerConfig,
        *,
        tokenizer: Any = None,
        publisher: PolicyPublisher | None = None,
        loggers: Sequence[Logger] = (),
        eval_hook: Callable[["Trainer"], dict[str, float]] | None = None,
        eval_every: int | None = None,
        checkpoint_dir: str | Path | None = None,
        ctx: dist_utils.DistContext | None = None,
        teacher: Teacher | None = None,
    ) -> None:
        if algorithm.requires_teacher and teacher is None:
            raise ValueError(f"{algorithm.name} scores every item with a distillation teacher: pass "
                             "Trainer(teacher=...) (training/teacher.py builds one from the algorithm's teacher)")
        self.teacher = teacher if algorithm.requires_teacher else None
        if algorithm.teacher_top_k is not None and config.packing:
            raise ValueError(f"{algorithm.name} reads the teacher's top {algorithm.teacher_top_k} tokens at each "
                             "position, which is scored on padded rows only: set trainer.packing false")
        self.cfg = config
        torch.manual_seed(config.seed)
        random.seed(config.seed)
        prepared = prepare_model(model, config, ctx or dist_utils.init_distributed(config.device),
                                 caller_ctx=ctx is not None, keep_reference=algorithm.requires_reference)
        self.model, self.ctx, reference = prepared
        self.compute_dtype = resolve_dtype(config.dtype, self.ctx.device)
        self.scorer = PolicyScorer(self.model, device_type=self.ctx.device.type, compute_dtype=self.compute_dtype,
                                   chunk_tokens=config.logprob_chunk_tokens)
        self.ref_scorer: PolicyScorer | None = None
        if reference is not None:  # bf16 on an accelerator (half an fp32 master's memory), fp32 on CPU
            ref_dtype = torch.bfloat16 if self.ctx.device.type == "cuda" else None
            reference = reference.to(device=self.ctx.device, dtype=ref_dtype)
            self.ref_scorer = PolicyScorer(reference, device_type=self.ctx.device.type,
                                           compute_dtype=self.compute_dtype, chunk_tokens=config.logprob_chunk_tokens)
        self.algorithm = algorithm
        self.source = as_batch_source(source)
        self.tokenizer = tokenizer
        self.publisher = publisher  # adopted by the setter, as is one assigned later
        self.loggers = list(loggers) if self.ctx.is_main else []
        self.eval_hook, self.eval_every = eval_hook, eval_every
        self.checkpoint_dir = Path(checkpoint_dir) if checkpoint_dir else None
        self.pad_id = pad_id(self.model, tokenizer)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=config.lr, betas=config.betas,
                                           weight_decay=config.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, lr_multiplier(
            config.schedule, warmup_steps=config.warmup_steps, total_steps=config.total_steps))
        self.batcher = MicroBatcher(micro_token_budget=config.micro_token_budget, pad_id=self.pad_id,
                                    packing=config.packing, scorer=self.scorer, ctx=self.ctx,
                                    compute_dtype=self.compute_dtype,
                                    share_prompts=(config.share_prompts and not self.ctx.is_distributed
                                                   and not config.compile and not config.grad_checkpointing))
        self.reuse = algorithm.reuse
        check_max_lag(self.reuse, config.max_lag)
        self.step = 0  # train steps: one generated batch each
        self.updates = 0  # optimiser updates: `reuse.updates` per step; each is one policy version
        self._shared_positions = 0  # this step's prompt positions run once for several rows
        self.policy_version = 0
        self.history: list[dict[str, float]] = []
        self.update_history: list[dict[str, float]] = []  # the loss's metrics of every optimiser update

    @property
    def packing(self) -> bool:
        """Whether this run trains on packed rows (False once the model failed the packing check)."""
        return self.batcher.packing

    @property
    def publisher(self) -> PolicyPublisher | None:
        return self._publisher

    @publisher.setter
    def publisher(self, publisher: PolicyPublisher | None) -> None:
        self._publisher = None if publisher is None else as_policy_publisher(publisher)

    # ---- one optimizer step -------------------------------------------------
    def _filter(self, batch: SAWBatch) -> tuple[list[SAWItem], int]:
        items, stale = list(batch.items), 0
        fresh = [i for i in items if not is_stale(i.meta.get("policy_version"), self.policy_version, self.cfg.max_lag)]
        stale, items = len(items) - len(fresh), fresh
        if self.algorithm.requires_actor_logprobs:
            missing = [i.meta for i in items if i.actor_logprobs is None]
            if missing:
                raise ValueError(
                    f"{self.algorithm.name} needs the actor's sampling log-probs, but {len(missing)} "
                    f"items have none (e.g. {missing[0]}); scripted/offline data suits sft only"
                )
        too_long = [len(i) for i in items if len(i) > self.cfg.max_seq_len]
        if too_long and self.cfg.overlong == "error":
            raise ValueError(f"{len(too_long)} items exceed max_seq_len={self.cfg.max_seq_len} "
                             f"(longest {max(too_long)}); set overlong='drop' to drop and count them")
        items = [i for i in items if len(i) <= self.cfg.max_seq_len]
        return items, stale

    def _split_inert(self, items: list[SAWItem]) -> tuple[list[SAWItem], list[SAWItem]]:
        """(items to score, items skipped): under a loss inert at zero advantage an
        item of weight 0 adds exactly nothing, so it gets no forward or backward pass."""
        if not (self.cfg.skip_inert and is_inert(self.algorithm.loss)):
            return items, []
        return [i for i in items if i.weight != 0.0], [i for i in items if i.weight == 0.0]

    def _totals(self, mbs: list[MicroBatch], skipped: list[SAWItem]) -> dict[str, float]:
        """Whole-step totals over all ranks in one all-reduce, from this rank's micro-batches
        and its share of the skipped items. The loss normalisers (`tokens`, `sequences`,
        `mean_weight`) count skipped items, so the gradient is the unskipped one;
        `scored_tokens` weighs the metrics of the micro-batches that ran."""
        real = [mb for mb in mbs if not is_pad(mb)]
        mine = [sum(mb.action_tokens for mb in real), float(sum(len(mb.meta) for mb in real)),
                sum(float(mb.weights.sum()) for mb in real), float(len(skipped)),
                float(sum(sum(i.action_mask[1:]) for i in skipped))]  # position 0 is never an action token
        scored, seqs, weight_sum, skipped_items, skipped_tokens = dist_utils.all_reduce_floats(mine, "sum", self.ctx)
        sequences = seqs + skipped_items
        return {"tokens": scored + skipped_tokens, "sequences": sequences,
                "mean_weight": weight_sum / max(sequences, 1.0), "scored_tokens": scored,
                "skipped_items": skipped_items, "skipped_tokens": skipped_tokens}

    def _forward_loss(self, mb: MicroBatch, totals: dict[str, float]) -> tuple[torch.Tensor, dict[str, Any]]:
        device = self.ctx.device
        # Only positions that score an action token need scoring: start at the first
        # one any row has (decided on the host, from the CPU micro-batch).
        acting = mb.action_mask[:, 1:].sum(0).nonzero()
        start = int(acting[0]) if len(acting) else 0
        temps = None
        if mb.temperatures is not None and self.algorithm.requires_actor_logprobs:
            # actor log-probs are of softmax(logits / T): compare like with like
            # (top-p renormalisation is not replayed: keep top_p=1 for ratio losses)
            if bool((mb.temperatures != 1.0).any()):  # the micro-batch is on the host: no sync
                temps = to_device(mb.temperatures, device)
        loss_fn = self.algorithm.loss
        score = (PackedScoring(mb, device, temps is not None) if mb.packed is not None
                 else PaddedScoring(mb, self.batcher, device, temps))
        top_ids = None if mb.teacher_top_ids is None else to_device(mb.teacher_top_ids[:, start + 1:], device)
        scored = score(self.scorer, start, loss_fn.needs_entropy, top_ids)
        inputs = LossInputs(
            logprobs=scored.logprobs,
            old_logprobs=to_device(mb.actor_logprobs[:, start + 1:], device),
            mask=to_device(mb.action_mask[:, start + 1:], device),
            advantages=to_device(mb.weights, device),
            num_tokens=totals["tokens"],
            num_sequences=totals["sequences"],
            entropy=scored.entropy,
            batch_mean_advantage=totals["mean_weight"],
            teacher_logprobs=(None if mb.teacher_logprobs is None
                              else to_device(mb.teacher_logprobs[:, start + 1:], device)),
            teacher_top_logprobs=(None if mb.teacher_top_logprobs is None
                                  else to_device(mb.teacher_top_logprobs[:, start + 1:], device)),
            student_top_logprobs=scored.top,
        )
        if self.ref_scorer is not None:
            with torch.no_grad():
                inputs.ref_logprobs = score(self.ref_scorer, start, False).logprobs
        self._shared_positions += score.shared_positions
        out = loss_fn(inputs)
        return out.loss, out.metrics

    def train_step(self) -> dict[str, float]:
        t0 = time.perf_counter()
        batch = self.source.next_batch()
        try:
            return self._train_on(batch, t0)
        except Exception as exc:
            self.source.record_failure(exc)  # a queue source names it if these entries fail again
            raise

    def _train_on(self, batch: SAWBatch, t0: float) -> dict[str, float]:
        """One train step: the batch's optimiser updates (`reuse`), the LR schedule, publishing, ..."""
        items, stale = self._filter(batch)
        teacher_metrics: dict[str, float] = {}
        if self.teacher is not None:  # once per step: every update of the batch reads the same scores
            items, teacher_metrics = with_teacher_logprobs(self.teacher, items, self.ctx,
                                                           top_k=self.algorithm.teacher_top_k)
        plan = plan_updates(items, [i.meta.get("group_id") for i in items], mini_batches=self.reuse.mini_batches,
                            epochs=self.reuse.epochs, seed=self.cfg.seed * 1_000_003 + self.step) or [[]]
        self._shared_positions, mbs, per_update = 0, [], []
        skipped = {"skipped_items": 0.0, "skipped_tokens": 0.0}
        for part in plan:
            part_mbs, totals, metrics = self._update(part)
            mbs += part_mbs
            skipped = {k: v + totals[k] for k, v in skipped.items()}
            per_update.append(metrics)
        self.scheduler.step()
        self.step += 1
        skipped = {k: v / self.reuse.epochs for k, v in skipped.items()}  # each epoch passes over every item once
        return self._after_step(batch, items, mbs, stale, skipped,
                                {**merge_update_metrics(per_update), **teacher_metrics}, t0)

    def _update(self, items: list[SAWItem]) -> tuple[list[MicroBatch], dict[str, float], dict[str, float]]:
        """One optimiser update on `items`: the loss is normalised by their own totals."""
        scored, skipped = self._split_inert(items)
        mbs = self.batcher.split(scored)
        totals = self._totals(mbs, dist_utils.shard_batch(skipped, self.ctx))
        step_metrics = StepMetrics()
        for i, mb in enumerate(mbs):
            dist_utils.set_gradient_sync(self.model, i == len(mbs) - 1)
            loss, metrics = self._forward_loss(mb, totals)
            # FSDP averages gradients over ranks; our normaliser is already global.
            (loss * self.ctx.world_size).backward()
            step_metrics.add({**metrics, "loss": loss.detach()}, has_tokens=mb.action_tokens > 0,
                             share=mb.action_tokens / max(totals["scored_tokens"], 1.0))
        if not mbs and totals["skipped_items"]:
            self._zero_grads()
        metric_sums = {"loss": 0.0, **step_metrics.result(self.ctx)}  # scored nothing: exactly 0, as unskipped
        metric_sums["grad_norm"] = self._clip()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.updates += 1
        self.update_history.append(metric_sums)
        return mbs, totals, metric_sums

    def _zero_grads(self) -> None:
        """Every item was skipped: the unskipped step's gradient is exactly 0, and AdamW
        would skip a parameter whose grad is None (no moment decay, no weight decay)."""
        for p in self.model.parameters():
            if p.requires_grad and p.grad is None:
                p.grad = torch.zeros_like(p)

    def _clip(self) -> float:
        params = [p for p in self.model.parameters() if p.grad is not None]
        if not params:
            return 0.0
        max_norm = self.cfg.max_grad_norm if self.cfg.max_grad_norm is not None else math.inf
        norm = torch.nn.utils.clip_grad_norm_(params, max_norm)
        if hasattr(norm, "full_tensor"):
            norm = norm.full_tensor()
        value = float(norm)
        if not math.isfinite(value):
            raise FloatingPointError(f"non-finite gradient norm {value} at step {self.step + 1}")
        return value

    def _after_step(self, batch, items, mbs, stale, totals, metric_sums, t0) -> dict[str, float]:
        """The step's metrics. The loss's own (ratio, clip statistics) cover the scored tokens: items
        skipped as inert count in `loss` and the gradient, not in them, and in `skipped_*` once each
        (as in `items`, whatever the epochs). Over a batch's updates: `merge_update_metrics`."""
        total_tokens = dist_utils.all_reduce_sum(float(sum(mb.real_tokens for mb in mbs)), self.ctx)
        secs = time.perf_counter() - t0
        metrics = {
            "loss": metric_sums.pop("loss", 0.0),
            "grad_norm": metric_sums.pop("grad_norm", 0.0),
            "updates": float(self.updates),
            "lr": self.scheduler.get_last_lr()[0],
            "items": float(len(items)),
            "skipped_items": totals["skipped_items"],
            "skipped_tokens": totals["skipped_tokens"],
            "shared_prompt_positions": float(self._shared_positions),
            "stale_dropped": float(stale),
            "micro_batches": float(len(mbs)),
            "padding_waste": padding_waste(mbs),
            "step_seconds": secs,
            "tokens_per_second": total_tokens / max(secs, 1e-9),
            **{k: float(v) for k, v in batch.meta.items() if isinstance(v, (int, float))},
            **metric_sums,
        }
        if self.step % self.cfg.sync_every_steps == 0:
            self.publish()
        if self.eval_hook is not None and self.eval_every and self.step % self.eval_every == 0:
            metrics.update({f"eval/{k}": v for k, v in self.eval_hook(self).items()})
        if self.checkpoint_dir and self.cfg.checkpoint_every and self.step % self.cfg.checkpoint_every == 0:
            self.save_checkpoint()
        metrics["policy_version"] = float(self.policy_version)
        for lg in self.loggers:
            lg.log(self.step, metrics)
        self.history.append(metrics)
        return metrics

    # ---- publishing, checkpoints, loop -------------------------------------------
    def full_weights(self) -> dict[str, torch.Tensor]:
        """Full HF-named weights (LoRA merged); materialised on rank 0.

        In one process these are detached views of the live weights, on the
        model's device (no host round trip per publish on a GPU): publishers
        copy what they need before `publish` returns, and nothing trains
        meanwhile. Clone them to keep a snapshot.
        """
        if is_lora(self.model):
            return merged_state_dict(self.model)
        if not self.ctx.is_distributed:
            return {k: v.detach() for k, v in self.model.state_dict().items()}
        return dist_utils.full_state_dict(self.model, self.ctx)

    def publish(self) -> None:
        """Publish the weights as policy version `updates` (one version per optimiser update)."""
        publisher = self.publisher
        if publisher is None:
            self.policy_version = self.updates
            return
        if is_lora(self.model) and publisher.accepts_adapters:
            adapter = adapter_state_dict(self.model)  # the adapter alone: the engine keeps the base
            if self.ctx.is_main:
                publisher.publish_adapter(adapter, adapter_config(self.model), version=self.updates)
        else:
            weights = self.full_weights()
            if self.ctx.is_main:
                publisher.publish(weights, version=self.updates)
        self.policy_version = self.updates

    def save_checkpoint(self) -> Path:
        if self.checkpoint_dir is None:
            raise ValueError("Trainer has no checkpoint_dir")
        data = {"source": self.source.state_dict(), "policy_version": self.policy_version, "updates": self.updates}
        path = save_checkpoint(self.checkpoint_dir, self.step, model=self.model, optimizer=self.optimizer,
                               scheduler=self.scheduler, ctx=self.ctx, tokenizer=self.tokenizer,
                               data_state=data, keep_last=self.cfg.keep_last)
        self.source.checkpoint_committed(path)  # e.g. a stream source acknowledges what this checkpoint holds
        return path

    def resume(self, path: str | Path | None = None) -> bool:
        """Load the given checkpoint, else checkpoint_dir's newest intact one (past corrupt ones,
        with a warning; `CheckpointCorrupt` when none is intact); False when there is none yet."""
        target = Path(path) if path else (Path(self.checkpoint_dir) if self.checkpoint_dir else None)
        if target is None or (not path and not candidates(target)):
            return False
        state = load_checkpoint(target, model=self.model, optimizer=self.optimizer,
                                scheduler=self.scheduler, ctx=self.ctx)
        target = Path(state["path"])
        self.step = int(state["step"])
        data = state.get("data") or {}
        self.source.load_state_dict(data.get("source", {}))
        self.updates = int(data.get("updates", self.step))  # checkpoints before rollout reuse: one per step
        self.policy_version = int(data.get("policy_version", self.updates))
        log.info("resumed from %s at step %d", target, self.step)
        return True

    def train(self, until_step: int) -> list[dict[str, float]]:
        """Run optimizer steps until `self.step == until_step` (resume-friendly)."""
        out = []
        while self.step < until_step:
            out.append(self.train_step())
        return out

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()

