"""Rollout reuse: several optimiser updates per generated batch (`training/rollout_reuse.py`).

The checks: the plan of updates by hand; one update per batch is the step as it always was;
with two mini-batches the second update's ratio is the one computed from the first update's
weights (recomputed here by hand from a plain trainer that took the first update alone), and
clipping then acts; two epochs likewise; versions count updates; and the bad combinations
are refused naming the fields.
"""

from __future__ import annotations

import math

import pytest
import torch

from ludic_core.algorithms import build_algorithm, make_grpo
from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.config import GRPOConfig, RolloutReuse, TrainerConfig
from ludic_core.device import model_device
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training.rollout_reuse import merge_update_metrics, plan_updates
from ludic_core.training.trainer import Trainer

CFG = {"dtype": "float32", "micro_token_budget": 100_000, "max_seq_len": 512, "lr": 3e-3}


def test_the_plan_by_hand():
    items = list("abcdefgh")
    groups = [0, 0, 1, 1, 2, 2, 3, 3]
    assert plan_updates(items, groups, mini_batches=1, epochs=1, seed=5) == [items]  # reuse off: the batch as is
    # random.Random(7).shuffle([[0,1],[2,3],[4,5],[6,7]]) orders the groups 3, 1, 0, 2 (run once in a REPL);
    # two mini-batches of 4 items: groups 3 and 1, then 0 and 2
    assert plan_updates(items, groups, mini_batches=2, epochs=1, seed=7) == [list("ghcd"), list("abef")]
    two_epochs = plan_updates(items, groups, mini_batches=2, epochs=2, seed=7)
    assert len(two_epochs) == 4 and two_epochs[:2] == [list("ghcd"), list("abef")]
    assert sorted(two_epochs[2] + two_epochs[3]) == items  # each epoch passes over every item once
    for part in two_epochs:  # a group is never split
        assert all(part.count(x) == part.count(y) for x, y in zip(items[::2], items[1::2]) if x in part or y in part)
    # groups of one (None) and more mini-batches than groups: no empty update
    assert plan_updates(["x", "y"], [None, None], mini_batches=4, epochs=1, seed=0) in ([["x"], ["y"]], [["y"], ["x"]])
    with pytest.raises(ValueError, match="mini_batches and epochs must be >= 1"):
        plan_updates(items, groups, mini_batches=0, epochs=1, seed=0)


def test_merged_metrics_by_hand():
    merged = merge_update_metrics([{"ratio_max": 1.0, "ratio_min": 1.0, "clip_frac": 0.0, "loss": 2.0},
                                   {"ratio_max": 1.5, "ratio_min": 0.7, "clip_frac": 0.5, "loss": 1.0}])
    assert merged["ratio_max"] == 1.5 and merged["ratio_min"] == 0.7  # extremes over the updates
    assert merged["clip_frac"] == 0.25 and merged["loss"] == 1.5  # the rest: their mean
    assert merged["last_update/clip_frac"] == 0.5


def _on_policy_items(model, n: int = 8, group: int = 2) -> list[SAWItem]:
    """Random sequences whose actor log-probs are the model's own (teacher-forced at T=1):
    the batch a synchronous sampler would have produced, so the first update's ratio is 1."""
    g = torch.Generator().manual_seed(3)
    items = []
    for i in range(n):
        prompt, completion = 12 + (i // group), 6 + i % 3
        ids = torch.randint(4, 200, (prompt + completion,), generator=g).tolist()
        with torch.no_grad():
            logp = torch.log_softmax(model(torch.tensor([ids], device=model_device(model))).logits[0].float(), -1)
        lps = [0.0] * prompt + [float(logp[t - 1, ids[t]]) for t in range(prompt, len(ids))]
        items.append(SAWItem(ids, [1] * len(ids), [0] * prompt + [1] * completion, 1.0 if i % 2 else -1.0,
                             {"group_id": f"g{i // group}", "sampling_temperature": 1.0}, actor_logprobs=lps))
    return items


class _Fixed:
    def __init__(self, *batches):
        self.batches = list(batches)

    def next_batch(self):
        return SAWBatch(items=list(self.batches.pop(0)), meta={})

    def state_dict(self):
        return {}

    def load_state_dict(self, state):
        pass


def _weights(trainer: Trainer) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in trainer.full_weights().items()}


def _ratios(model, items: list[SAWItem]) -> torch.Tensor:
    """exp(log pi(token) - actor log-prob) over every action token of `items`, by a plain forward."""
    out = []
    with torch.no_grad():
        for it in items:
            ids = torch.tensor([it.input_ids], device=model_device(model))
            logp = torch.log_softmax(model(ids).logits[0].float(), -1)
            for t, a in enumerate(it.action_mask):
                if a:
                    out.append(math.exp(float(logp[t - 1, it.input_ids[t]]) - it.actor_logprobs[t]))
    return torch.tensor(out)


@pytest.mark.parametrize("reuse, parts", [((2, 1), "halves"), ((1, 2), "twice")])
def test_each_update_sees_the_ratio_the_previous_updates_made(tiny_model_dir, reuse, parts):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    items = _on_policy_items(model)
    mini_batches, epochs = reuse
    algo = make_grpo(reuse=RolloutReuse(mini_batches=mini_batches, epochs=epochs))
    reused = Trainer(model, algo, _Fixed(items), TrainerConfig(**CFG), tokenizer=tok)
    metrics = reused.train_step()
    first, second = reused.update_history
    plan = plan_updates(items, [i.meta["group_id"] for i in items], mini_batches=mini_batches, epochs=epochs,
                        seed=0)

    # the reference: a plain trainer (one update per batch) given the plan's two parts as two batches
    plain_model, _ = load_model_and_tokenizer(tiny_model_dir)
    plain = Trainer(plain_model, make_grpo(), _Fixed(plan[0], plan[1]), TrainerConfig(**CFG), tokenizer=tok)
    plain.train_step()
    expected = _ratios(plain.model, plan[1])  # the second update's ratios, from the first update's weights
    plain.train_step()

    assert first["ratio_max"] == pytest.approx(1.0, abs=1e-5) and first["ratio_min"] == pytest.approx(1.0, abs=1e-5)
    assert first["clip_frac"] == 0.0
    assert second["ratio_max"] == pytest.approx(float(expected.max()), rel=1e-4)
    assert second["ratio_min"] == pytest.approx(float(expected.min()), rel=1e-4)
    assert second["ratio_mean"] == pytest.approx(float(expected.mean()), rel=1e-4)
    assert float(expected.max() - expected.min()) > 0.05  # the policy moved: the ratio spreads
    weights_plus = {1.0, -1.0}
    assert {it.weight for it in plan[1]} == weights_plus
    # clipping acts: a token whose ratio left [0.8, 1.2] in the direction its advantage pushes is clipped
    assert second["clip_frac"] > 0.0
    assert metrics["updates"] == 2.0 and metrics["ratio_max"] == second["ratio_max"]
    assert metrics["last_update/clip_frac"] == second["clip_frac"]
    # and the two updates are exactly the plain trainer's two steps
    a, b = _weights(reused), _weights(plain)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5


def test_one_update_per_batch_is_the_step_as_before(tiny_model_dir):
    """reuse 1 x 1 (the default): one update, the batch in its own order, versions one per step."""
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    items = _on_policy_items(model)
    tr = Trainer(model, make_grpo(), _Fixed(items, items), TrainerConfig(**CFG), tokenizer=tok)
    tr.train(2)
    assert tr.updates == tr.step == tr.policy_version == 2 and len(tr.update_history) == 2
    assert "last_update/clip_frac" not in tr.history[-1]


def test_versions_count_updates(tiny_model_dir):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    items = _on_policy_items(model)
    algo = make_grpo(reuse=RolloutReuse(mini_batches=2, epochs=2))
    tr = Trainer(model, algo, _Fixed(items, items), TrainerConfig(**CFG, max_lag=3), tokenizer=tok)
    tr.train(2)
    assert (tr.step, tr.updates, tr.policy_version) == (2, 8, 8)
    assert [h["policy_version"] for h in tr.history] == [4.0, 8.0]


def test_bad_combinations_are_refused_naming_the_fields(tiny_model_dir):
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    algo = make_grpo(reuse=RolloutReuse(mini_batches=2, epochs=2))
    with pytest.raises(ValueError, match="max_lag=1 counts policy versions.*set max_lag >= 3"):
        Trainer(model, algo, _Fixed(), TrainerConfig(**CFG, max_lag=1), tokenizer=tok)
    with pytest.raises(ValueError, match="sampler_correction='token_tis'"):
        GRPOConfig(sampler_correction="token_tis", reuse={"mini_batches": 2})
    with pytest.raises(ValueError, match="epochs"):
        GRPOConfig(reuse={"epochs": 0})
    built = build_algorithm(GRPOConfig.model_validate({"reuse": {"mini_batches": 4, "epochs": 2}}))
    assert (built.reuse.mini_batches, built.reuse.epochs, built.reuse.updates) == (4, 2, 8)


def test_two_mini_batches_two_epochs_by_hand(tiny_model_dir):
    """Reuse 2 x 2: the four updates are a plain trainer's four steps over the plan's parts, and
    each update's ratio statistics and clip fraction are the ones computed by hand from the
    weights the previous updates left: ratio = exp(log pi - sampler log-prob) per action token,
    clipped where the advantage pushes it past [0.8, 1.2] (A > 0 and r > 1.2, or A < 0 and r < 0.8)."""
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    items = _on_policy_items(model, n=8, group=2)
    reused = Trainer(model, make_grpo(reuse=RolloutReuse(mini_batches=2, epochs=2)), _Fixed(items),
                     TrainerConfig(**{**CFG, "lr": 3e-2}), tokenizer=tok)
    reused.train_step()
    plan = plan_updates(items, [i.meta["group_id"] for i in items], mini_batches=2, epochs=2, seed=0)
    assert len(plan) == len(reused.update_history) == 4
    assert sorted(map(id, plan[0] + plan[1])) == sorted(map(id, plan[2] + plan[3])) == sorted(map(id, items))

    plain_model, _ = load_model_and_tokenizer(tiny_model_dir)
    plain = Trainer(plain_model, make_grpo(), _Fixed(*plan), TrainerConfig(**{**CFG, "lr": 3e-2}), tokenizer=tok)
    clipped_some = False
    for part, seen in zip(plan, reused.update_history):
        ratios = _ratios(plain.model, part)  # from the weights the previous updates left
        adv = torch.tensor([it.weight for it in part for a in it.action_mask if a])
        clipped = ((adv > 0) & (ratios > 1.2)) | ((adv < 0) & (ratios < 0.8))
        assert seen["ratio_max"] == pytest.approx(float(ratios.max()), rel=1e-4)
        assert seen["ratio_min"] == pytest.approx(float(ratios.min()), rel=1e-4)
        assert seen["clip_frac"] == pytest.approx(float(clipped.float().mean()), abs=1e-6)
        clipped_some |= bool(clipped.any())
        plain.train_step()
    assert reused.update_history[0]["ratio_max"] == pytest.approx(1.0, abs=1e-5)  # the sampler's own weights
    assert clipped_some, "no token left the clip range: raise the learning rate so clipping is checked"
    a, b = _weights(reused), _weights(plain)
    assert max(float((a[k] - b[k]).abs().max()) for k in a) < 1e-5
