"""`PolicyScorer`: the trainer's per-token log-probs of a micro-batch, lean on memory.

Peak training memory of a small model with a large vocabulary is dominated by
the output layer: tokens x vocabulary logits, their fp32 log-softmax and their
gradient (49 GB of a 0.6B model's step at a 151,936 vocabulary and a 32k-token
micro-batch). Two cuts, both exact:

1. Only positions that score an action token are projected: everything before
   the first action position of the micro-batch is skipped.
2. For an HF causal LM whose logits are a plain linear map of its decoder's
   output (Llama, Qwen, Mistral, ...: checked on the first micro-batch), the
   log-probs come from the hidden states through `linear_token_logprobs`, so no
   [tokens, vocab] tensor exists at all. Other models (logit soft-capping or
   scaling, an output layer that is not an `nn.Linear`, a sharded one) get
   `token_logprobs` on the model's own logits, which keeps those logits but no
   fp32 copy of them.

Compute has one more cut, exact too: rows that open with the same prompt (a GRPO
group) can run it once (`shared_prefix_logprobs`, laid out by `shared_prefix`).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
from typing import Any, NamedTuple

import torch
import torch.utils.checkpoint

from ludic_core.device import attention_backends
from ludic_core.losses import linear_token_logprobs, token_entropy, token_logprobs
from ludic_core.training.shared_prefix import SharedPrefix

__all__ = ["PolicyScorer", "TokenScores"]


class TokenScores(NamedTuple):
    """A micro-batch's scores [B, T'] from one forward: the tokens' log-probs, their entropies
    (when asked) and, for top-k distillation, the log-probs of the asked ids [B, T', K]."""

    logprobs: torch.Tensor
    entropy: torch.Tensor | None = None
    top: torch.Tensor | None = None

log = logging.getLogger(__name__)

# Config fields of HF models whose logits are not lm_head(hidden) alone.
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "lm_head_multiplier",
                     "output_multiplier_scale", "logit_multiplier")


class PolicyScorer:
    """log pi(token) at every action position of a micro-batch (and entropies on request)."""

    def __init__(self, model: Any, *, device_type: str, compute_dtype: torch.dtype, chunk_tokens: int) -> None:
        self.model = model
        self.device_type = device_type
        self.compute_dtype = compute_dtype
        self.chunk_tokens = chunk_tokens
        self.keeps_logits = _accepts_logits_to_keep(model)
        # a scoring forward never decodes on: without this, HF models build a KV cache
        # (a copy of every layer's keys and values) on each training forward
        self.no_cache = {"use_cache": False} if _accepts(model, "use_cache") else {}
        self.head: Any
        self.decoder: Any
        self.head, self.decoder = _linear_head(model) if self.keeps_logits else (None, None)
        base = model.get_base_model() if hasattr(model, "get_base_model") else model  # under PEFT's wrapper
        self.cache_kwarg = next((n for n in ("cache", "past_key_values") if _accepts_named(base, n)), None)
        self.verified = False

    @property
    def fused(self) -> bool:
        """True while log-probs come straight from hidden states (no logits)."""
        return self.head is not None

    @property
    def can_share(self) -> bool:
        """Whether `shared_prefix_logprobs` can run: log-probs from hidden states (checked on a first
        micro-batch), a KV cache the forward takes, no activation checkpointing (it drops caches)."""
        checkpointing = getattr(self.model, "is_activation_checkpointing", None)  # transformers >= 5.2x
        if checkpointing is None:
            checkpointing = getattr(self.model, "is_gradient_checkpointing", False)
        return self.fused and self.verified and self.cache_kwarg is not None and not checkpointing

    def __call__(self, ids: torch.Tensor, attention_mask: torch.Tensor | None, start: int,
                 temperatures: torch.Tensor | None, need_entropy: bool,
                 position_ids: torch.Tensor | None = None,
                 positions: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(log-probs, entropies) of `score`."""
        scores = self.score(ids, attention_mask, start, temperatures, need_entropy, position_ids, positions)
        return scores.logprobs, scores.entropy

    def score(self, ids: torch.Tensor, attention_mask: torch.Tensor | None, start: int,
              temperatures: torch.Tensor | None, need_entropy: bool,
              position_ids: torch.Tensor | None = None,
              positions: torch.Tensor | None = None,
              top_ids: torch.Tensor | None = None) -> TokenScores:
        """[B, T-1-start] log-probs of ids[:, start+1:] (and entropies of the same positions).

        Packed rows (`batching.packing`) come with `position_ids` and no attention
        mask, and with one temperature per position ([B, T]) instead of per row.
        `positions` (flat indices into the [B, T-start] grid) limits the log-probs to those
        positions where log-probs come from hidden states; the others read 0.
        Given `top_ids` [B, T-1-start, K] (top-k distillation: the teacher's likeliest ids at
        each position), `top` holds the log-probs of those ids [B, T-1-start, K], from logits
        of the scored positions only (`positions`, when given)."""
        if temperatures is not None and temperatures.dim() == 2:
            temperatures = temperatures[:, start:]
        inputs = {"input_ids": ids, "attention_mask": attention_mask, **self.no_cache}
        if position_ids is not None:
            inputs["position_ids"] = position_ids
        if self.head is not None:
            hidden = self._hidden_states(inputs)
            if hidden is not None:
                return self._from_hidden(hidden[:, start:], ids[:, start:], temperatures, need_entropy, positions,
                                         top_ids)
        return self._from_logits(inputs, start, temperatures, need_entropy, top_ids)

    def _autocast(self) -> torch.autocast:
        return torch.autocast(self.device_type, dtype=self.compute_dtype, enabled=self.compute_dtype != torch.float32)

    def _forward_context(self) -> contextlib.ExitStack:
        """Autocast plus the attention kernels the library runs under (`attention_backends`)."""
        stack = contextlib.ExitStack()
        stack.enter_context(self._autocast())
        stack.enter_context(attention_backends(torch.device(self.device_type)))
        return stack

    def _hidden_states(self, inputs: dict[str, Any]) -> torch.Tensor | None:
        captured: list[Any] = []
        hook = self.decoder.register_forward_hook(lambda _m, _a, out: captured.append(out))
        try:
            with self._forward_context():
                last = self.model(**inputs, logits_to_keep=1).logits
        finally:
            hook.remove()
        out = captured[-1]
        hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]
        if hasattr(self.head.weight, "full_tensor"):  # still sharded after forward (FSDP resharded it)
            self._give_up("its output layer is sharded outside forward")
            return None
        if not self.verified:
            with torch.no_grad(), self._autocast():
                mine = self.head(hidden[:, -1:])
            if mine.shape != last.shape or not torch.allclose(mine.float(), last.float(), rtol=1e-3, atol=1e-3):
                self._give_up("its logits are not lm_head(decoder output)")
                return None
            self.verified = True
        return hidden

    def shared_prefix_logprobs(self, plan: SharedPrefix, ids: torch.Tensor, start: int,
                               temperatures: torch.Tensor | None, need_entropy: bool,
                               positions: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(log-probs, entropies) of `shared_prefix_scores`."""
        scores = self.shared_prefix_scores(plan, ids, start, temperatures, need_entropy, positions)
        return scores.logprobs, scores.entropy

    def shared_prefix_scores(self, plan: SharedPrefix, ids: torch.Tensor, start: int,
                             temperatures: torch.Tensor | None, need_entropy: bool,
                             positions: torch.Tensor | None, top_ids: torch.Tensor | None = None) -> TokenScores:
        """`__call__`'s result for a padded micro-batch, its shared prompts run once (`plan`, on the
        device): the prompts forward with a KV cache, each row's completion against its prompt's."""
        captured: list[Any] = []
        hook = self.decoder.register_forward_hook(lambda _m, _a, out: captured.append(out))
        try:
            with self._forward_context():
                out = self.model(input_ids=plan.prefix_ids, attention_mask=plan.prefix_mask, use_cache=True,
                                 logits_to_keep=1)
                kwarg = self.cache_kwarg
                assert kwarg is not None  # `can_share` holds: the model takes a cache argument
                cache = getattr(out, kwarg)  # the output field is named as the argument
                cache.reorder_cache(plan.row_prompt)  # each row's prompt: an index_select, so gradients sum back
                self.model(input_ids=plan.suffix_ids, attention_mask=plan.suffix_mask,
                           position_ids=plan.suffix_positions, use_cache=True, logits_to_keep=1,
                           **{kwarg: cache})
        finally:
            hook.remove()
        prompt, own = (o.last_hidden_state if hasattr(o, "last_hidden_state") else o[0] for o in captured[-2:])
        flat = torch.cat((prompt.reshape(-1, prompt.shape[-1]), own.reshape(-1, own.shape[-1]),
                          own.new_zeros((1, own.shape[-1]))))
        return self._from_hidden(flat[plan.gather], ids[:, start:], temperatures, need_entropy, positions, top_ids)

    def _give_up(self, why: str) -> None:
        log.warning("%s: %s; scoring from its full logits instead", type(self.model).__name__, why)
        self.head = None

    def _from_hidden(self, hidden, ids, temperatures, need_entropy, positions=None, top_ids=None) -> TokenScores:
        logprobs = linear_token_logprobs(hidden, self.head.weight, self.head.bias, ids, temperatures=temperatures,
                                         chunk_tokens=self.chunk_tokens, compute_dtype=self.compute_dtype,
                                         positions=positions)
        entropy = None
        if need_entropy:  # entropy needs every token's probability: logits for these positions only
            with self._autocast():
                logits = self.head(hidden[:, :-1])
            entropy = token_entropy(_scaled(logits, temperatures))
        top = None if top_ids is None else self._top_from_hidden(hidden[:, :-1], temperatures, positions, top_ids)
        return TokenScores(logprobs, entropy, top)

    def _top_from_hidden(self, hidden: torch.Tensor, temperatures: torch.Tensor | None,
                         positions: torch.Tensor | None, top_ids: torch.Tensor) -> torch.Tensor:
        """log pi(top_ids) [B, W, K] from hidden states [B, W, H], projecting the scored positions only,
        `chunk_tokens` at a time (checkpointed under grad, so at most one [chunk, vocabulary] logits
        tensor lives at once); the others read 0."""
        batch, width = hidden.shape[:2]
        if positions is None:
            rows = torch.arange(batch, device=hidden.device).repeat_interleave(width)
            cols = torch.arange(width, device=hidden.device).repeat(batch)
        else:  # flat indices into the [B, W + 1] grid, whose last column never scores
            rows, cols = positions // (width + 1), positions % (width + 1)
        picked, ids = hidden[rows, cols], top_ids[rows, cols]
        temps = None
        if temperatures is not None:
            t = temperatures.to(hidden.device)
            temps = t[rows] if t.dim() == 1 else t[rows, cols]
        step = max(self.chunk_tokens, 1)
        parts = []
        for at in range(0, len(rows), step):  # a [chunk, vocabulary] logits tensor at a time
            args = (picked[at:at + step], ids[at:at + step], None if temps is None else temps[at:at + step])
            if torch.is_grad_enabled():  # recomputed in backward: no chunk's logits outlive it
                parts.append(torch.utils.checkpoint.checkpoint(self._top_chunk, *args, use_reentrant=False))
            else:
                parts.append(self._top_chunk(*args))
        top = torch.cat(parts) if parts else picked.new_zeros((0, top_ids.shape[-1]))
        return top.new_zeros((batch, width, top_ids.shape[-1])).index_put((rows, cols), top)

    def _top_chunk(self, hidden: torch.Tensor, ids: torch.Tensor, temps: torch.Tensor | None) -> torch.Tensor:
        with self._autocast():
            logits = self.head(hidden)
        logits = logits.float()
        if temps is not None:
            logits = logits / temps[:, None]
        return torch.log_softmax(logits, -1).gather(-1, ids)

    def _from_logits(self, inputs, start, temperatures, need_entropy, top_ids=None) -> TokenScores:
        ids = inputs["input_ids"]
        kwargs = {"logits_to_keep": ids.shape[1] - start} if self.keeps_logits and start else {}
        with self._forward_context():
            logits = self.model(**inputs, **kwargs).logits
        logits = logits[:, -(ids.shape[1] - start):]  # models that ignore logits_to_keep
        entropy = token_entropy(_scaled(logits[:, :-1], temperatures)) if need_entropy else None
        logprobs = token_logprobs(logits, ids[:, start:], temperatures=temperatures, chunk_tokens=self.chunk_tokens)
        top = None
        if top_ids is not None:
            top = torch.log_softmax(_scaled(logits[:, :-1].float(), temperatures), -1).gather(-1, top_ids)
        return TokenScores(logprobs, entropy, top)


def _scaled(logits: torch.Tensor, temperatures: torch.Tensor | None) -> torch.Tensor:
    """logits [B, T', V] over temperatures [B] (per row) or [B, >=T'] (per position)."""
    if temperatures is None:
        return logits
    t = temperatures.to(logits.device)
    return logits / (t[:, None, None] if t.dim() == 1 else t[:, :logits.shape[1], None])


def _accepts(model: Any, name: str) -> bool:
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _accepts_named(model: Any, name: str) -> bool:
    """Whether `model.forward` names the parameter `name` (not only takes **kwargs)."""
    try:
        return name in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _accepts_logits_to_keep(model: Any) -> bool:
    """HF causal LMs take `logits_to_keep` (logits for the last k positions only)."""
    return _accepts(model, "logits_to_keep")


def _linear_head(model: Any) -> tuple[Any, Any]:
    """(lm_head, decoder) when logits may be a plain linear map of the decoder output, else (None, None)."""
    try:
        head, decoder = model.get_output_embeddings(), model.get_decoder()
    except Exception:  # exotic models: no generic lookup
        return None, None
    config = getattr(model, "config", None)
    if any(getattr(config, name, None) not in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS):
        return None, None
    if type(head) is not torch.nn.Linear or decoder is None:
        return None, None  # a LoRA-wrapped or custom output layer
    return head, decoder
