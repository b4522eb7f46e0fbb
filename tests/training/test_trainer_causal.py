"""Padded rows run without an attention mask once the model proved causal without one
(pads come last, so a causal model's real positions never see them): the same gradient
as with the mask; a model that attends both ways without a mask keeps it."""

import logging

import torch
from transformers import LlamaForCausalLM

from ludic_core.algorithms import make_grpo
from ludic_core.models import load_model_and_tokenizer
from tests.training.test_trainer_packing import _trainer
from tests.training.test_trainer_skip import _assert_same_grads, _step_with_grads


def _masks_seen(model) -> list:
    seen: list = []
    model.register_forward_pre_hook(  # training forwards only (not the no-grad check)
        lambda _m, _a, kw: seen.append(kw.get("attention_mask")) if torch.is_grad_enabled() else None,
        with_kwargs=True)
    return seen


def test_a_causal_model_trains_padded_rows_without_a_mask_and_the_same_gradient(tiny_model_dir):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    bare = _trainer(model, tok, make_grpo(), packing=False, micro_token_budget=128)
    seen = _masks_seen(bare.model)
    on, g_on = _step_with_grads(bare)
    assert bare.batcher.causal is True and on["padding_waste"] > 0  # rows of unequal length, padded
    assert seen and all(m is None for m in seen)
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    masked = _trainer(model, tok, make_grpo(), packing=False, micro_token_budget=128)
    masked.batcher.causal = False  # as if the check had failed
    seen = _masks_seen(masked.model)
    off, g_off = _step_with_grads(masked)
    assert seen and all(m is not None for m in seen)
    _assert_same_grads(g_on, g_off)
    assert on["loss"] == off["loss"] or abs(on["loss"] - off["loss"]) < 1e-6


class _BidirectionalWithoutMask(LlamaForCausalLM):
    """A real model that, given no mask, lets every position see every other (no causal mask)."""

    def forward(self, input_ids=None, attention_mask=None, **kwargs):
        if attention_mask is None:
            b, t = input_ids.shape
            attention_mask = torch.ones(b, 1, t, t, dtype=torch.bool, device=input_ids.device)
        return super().forward(input_ids=input_ids, attention_mask=attention_mask, **kwargs)


def test_a_model_that_is_not_causal_without_a_mask_keeps_it(tiny_model_dir, caplog):
    _, tok = load_model_and_tokenizer(tiny_model_dir)
    model = _BidirectionalWithoutMask.from_pretrained(tiny_model_dir, dtype=torch.float32)
    tr = _trainer(model, tok, make_grpo(), packing=False, micro_token_budget=128)
    seen = _masks_seen(tr.model)
    with caplog.at_level(logging.WARNING):
        _step_with_grads(tr)
    assert tr.batcher.causal is False and "without an attention mask" in caplog.text
    assert seen and all(m is not None for m in seen)
