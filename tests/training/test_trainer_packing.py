"""Packed micro-batches train exactly as padded ones: same gradient, same loss and
metrics, for every loss family, at sampling temperatures other than 1 and with the
KL and entropy terms; and a model that lets packed items see each other is caught."""

import logging

import pytest
import torch
from transformers import LlamaForCausalLM

from ludic_core.algorithms import make_cispo, make_grpo, make_gspo, make_reinforce
from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.config import TrainerConfig
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training.trainer import Trainer
from tests.training.test_trainer_skip import _Batches, _assert_same_grads, _step_with_grads

# lengths from 9 to 60 tokens: short items share rows with long ones
LENGTHS = [(40, 20), (8, 4), (12, 9), (30, 6), (6, 3), (20, 14), (9, 5), (16, 3), (25, 11), (7, 2)]
WEIGHTS = [1.0, -0.5, 0.8, -1.0, 0.3, 0.6, -0.2, 1.0, -0.7, 0.4]


def _items(temperatures=(0.7, 1.0, 1.3)) -> list[SAWItem]:
    g = torch.Generator().manual_seed(3)
    items = []
    for i, ((prompt, completion), w) in enumerate(zip(LENGTHS, WEIGHTS)):
        ids = torch.randint(4, 200, (prompt + completion,), generator=g).tolist()
        lps = [0.0] * prompt + (-torch.rand(completion, generator=g) * 6).tolist()
        meta = {"sampling_temperature": temperatures[i % len(temperatures)]}
        items.append(SAWItem(ids, [1] * len(ids), [0] * prompt + [1] * completion, w, meta, actor_logprobs=lps))
    return items


def _trainer(model, tok, algorithm, *, packing: bool, **cfg) -> Trainer:
    cfg = {"dtype": "float32", "micro_token_budget": 256, "max_seq_len": 512, "max_grad_norm": None, **cfg}
    return Trainer(model, algorithm, _Batches(SAWBatch(_items())), TrainerConfig(packing=packing, **cfg),
                   tokenizer=tok)


ALGORITHMS = {
    "grpo": lambda: make_grpo(),
    "grpo_kl_entropy": lambda: make_grpo(kl_coef=0.1, entropy_coef=0.01),
    "gspo": lambda: make_gspo(clip_low=0.5, clip_high=2.0),
    "cispo": lambda: make_cispo(),
    "reinforce": lambda: make_reinforce(),
}


def _packed_and_padded(model_dir, make, budget):
    runs = {}
    for packing in (True, False):
        model, tok = load_model_and_tokenizer(model_dir)
        tr = _trainer(model, tok, make(), packing=packing, micro_token_budget=budget)
        runs[packing] = (*_step_with_grads(tr), tr)
    assert runs[True][2].packing  # the check passed: it did train packed
    return runs[True][:2], runs[False][:2]


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_packed_step_equals_padded_step(tiny_model_dir, name):
    """One micro-batch each way, so the per-micro-batch metrics are comparable too."""
    (on, g_on), (off, g_off) = _packed_and_padded(tiny_model_dir, ALGORITHMS[name], 10_000)
    _assert_same_grads(g_on, g_off)
    for key in ("loss", "grad_norm", *(k for k in off if k.startswith(("ratio", "clip", "entropy", "kl")))):
        assert on[key] == pytest.approx(off[key], rel=1e-4, abs=1e-6), key
    assert on["padding_waste"] < off["padding_waste"]
    assert on["items"] == off["items"] == 10 and on["micro_batches"] == off["micro_batches"] == 1


def test_packed_and_padded_micro_batches_cut_differently_and_agree(tiny_model_dir):
    """Under a small budget the two cut the step into different micro-batches: the
    whole-step normaliser still gives one gradient."""
    (on, g_on), (off, g_off) = _packed_and_padded(tiny_model_dir, ALGORITHMS["grpo_kl_entropy"], 128)
    assert on["micro_batches"] > 1 and off["micro_batches"] > 1 and on["padding_waste"] < off["padding_waste"]
    _assert_same_grads(g_on, g_off)
    assert on["loss"] == pytest.approx(off["loss"], rel=1e-5)


def test_packed_rows_cut_the_computed_positions(tiny_model_dir):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    rows: list[tuple[int, int]] = []
    model.register_forward_pre_hook(lambda _m, _a, kw: rows.append(tuple(kw["input_ids"].shape)), with_kwargs=True)
    m = _trainer(model, tok, make_grpo(), packing=True, micro_token_budget=10_000).train_step()
    # 250 tokens: rows of 60 hold them in 5 (300 positions) where padding takes 10 x 60
    assert rows[-1] == (5, 60) and m["micro_batches"] == 1
    assert m["padding_waste"] == pytest.approx(1 - 250 / 300)


class _MixesPackedItems(LlamaForCausalLM):
    """A real model that ignores `position_ids`: packed items attend to each other."""

    def forward(self, *args, position_ids=None, **kwargs):
        return super().forward(*args, **kwargs)


def test_a_model_that_mixes_packed_items_trains_padded(tiny_model_dir, caplog):
    _, tok = load_model_and_tokenizer(tiny_model_dir)
    mixing = _MixesPackedItems.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with caplog.at_level(logging.WARNING):
        tr = _trainer(mixing, tok, make_grpo(), packing=True)
        on, g_on = _step_with_grads(tr)
    assert not tr.packing and "does not keep packed items apart" in caplog.text
    plain = LlamaForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    off, g_off = _step_with_grads(_trainer(plain, tok, make_grpo(), packing=False))
    _assert_same_grads(g_on, g_off)
    assert on["padding_waste"] == off["padding_waste"]


def test_items_that_cannot_share_rows_stay_padded(tiny_model_dir):
    """One item of 100 tokens and twenty of 60: no two fit a row of 100, so packing would
    compute 21 x 100 positions where length-sorted padding computes 100 + 20 x 60."""
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    g = torch.Generator().manual_seed(0)
    items = [SAWItem(torch.randint(4, 200, (n,), generator=g).tolist(), [1] * n, [0] * (n - 4) + [1] * 4, 1.0, {})
             for n in [100] + [60] * 20]
    shapes: list[tuple[int, int]] = []
    model.register_forward_pre_hook(  # training forwards (not the once-per-run no-grad checks)
        lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)) if torch.is_grad_enabled() else None,
        with_kwargs=True)
    cfg = TrainerConfig(dtype="float32", micro_token_budget=10_000, max_seq_len=512, packing=True)
    m = Trainer(model, make_reinforce(), _Batches(SAWBatch(items)), cfg, tokenizer=tok).train_step()
    assert sorted(shapes) == [(1, 100), (20, 60)] and m["padding_waste"] == 0.0
