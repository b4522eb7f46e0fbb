"""Step metrics combine by kind (max, min, sum, token-weighted mean), and the trainer's
numbers do not depend on how a batch is split into micro-batches."""

import pytest
import torch

from ludic_core.algorithms import RLAlgorithm, make_grpo
from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.config import TrainerConfig
from ludic_core.credit import EpisodicReturn
from ludic_core.losses import ClippedSurrogateLoss, CompositeLoss, ReinforceLoss, TokenKLLoss
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training.distributed import DistContext
from ludic_core.training.step_metrics import StepMetrics, how_combined
from ludic_core.training.trainer import Trainer

ONE_PROCESS = DistContext(rank=0, world_size=1, local_rank=0, device=torch.device("cpu"))


def test_the_name_says_how_a_metric_combines():
    assert [how_combined(n) for n in ("ratio_max", "pg/ratio_min", "pg/loss", "loss", "clip_frac", "max_len")] \
        == ["max", "min", "sum", "sum", "mean", "mean"]


def test_step_metrics_by_hand():
    m = StepMetrics()
    m.add({"ratio_max": 1.5, "ratio_min": 0.8, "clip_frac": 0.4, "pg/loss": 0.3}, share=0.25, has_tokens=True)
    m.add({"ratio_max": 1.2, "ratio_min": 0.9, "clip_frac": 0.0, "pg/loss": 0.5}, share=0.75, has_tokens=True)
    # a padding micro-batch (no action tokens) reports 0.0 placeholders: they are not data
    m.add({"ratio_max": 0.0, "ratio_min": 0.0, "clip_frac": 0.0, "pg/loss": 0.0}, share=0.0, has_tokens=False)
    assert m.result(ONE_PROCESS) == pytest.approx({"ratio_max": 1.5, "ratio_min": 0.8, "clip_frac": 0.1,
                                                   "pg/loss": 0.8})


def test_tensor_metrics_stay_on_the_device_until_the_result():
    """The same numbers as 0-d tensors (a user loss may still report floats): `add`
    reads none of them on the host; `result` reads them all, at once."""
    from tests.host_syncs import SyncCounter

    parts = [({"ratio_max": 1.5, "ratio_min": 0.8, "clip_frac": 0.4, "pg/loss": 0.3, "user": 2.0}, 0.25, True),
             ({"ratio_max": 1.2, "ratio_min": 0.9, "clip_frac": 0.0, "pg/loss": 0.5, "user": 4.0}, 0.75, True),
             ({"ratio_max": 0.0, "ratio_min": 0.0, "clip_frac": 0.0, "pg/loss": 0.0, "user": 0.0}, 0.0, False)]
    m, counter = StepMetrics(), SyncCounter()
    with counter:
        for metrics, share, has_tokens in parts:
            m.add({k: v if k == "user" else counter.mark(torch.tensor(v)) for k, v in metrics.items()},
                  share=share, has_tokens=has_tokens)
    assert counter.count == 0, counter.where
    with counter:
        out = m.result(ONE_PROCESS)
    assert counter.where == ["tolist"]
    assert out == pytest.approx({"ratio_max": 1.5, "ratio_min": 0.8, "clip_frac": 0.1, "pg/loss": 0.8, "user": 3.5})
    assert all(type(v) is float for v in out.values())


def test_a_max_that_saw_no_token_reads_zero():
    m = StepMetrics()
    m.add({"ratio_max": 0.0}, share=0.0, has_tokens=False)
    assert m.result(ONE_PROCESS) == {"ratio_max": 0.0}


class _Fixed:
    def __init__(self, items): self.items = items
    def next_batch(self): return SAWBatch(items=list(self.items), meta={})
    def state_dict(self): return {}
    def load_state_dict(self, s): pass


def _ratio_items(n: int = 12) -> list[SAWItem]:
    """Random sequences whose recorded actor log-probs are far from the model's: ratios spread."""
    g = torch.Generator().manual_seed(1)
    items = []
    for i in range(n):
        prompt, completion = 20 + i, 4 + i % 5
        ids = torch.randint(4, 200, (prompt + completion,), generator=g).tolist()
        lps = [0.0] * prompt + (-torch.rand(completion, generator=g) * 8).tolist()
        items.append(SAWItem(ids, [1] * len(ids), [0] * prompt + [1] * completion, (-1.0) ** i,
                             {"sampling_temperature": 1.0}, actor_logprobs=lps))
    return items


def test_split_batches_report_the_same_step_metrics(tiny_model_dir):
    items = _ratio_items()
    hists = []
    for budget in (100_000, 70):
        model, tok = load_model_and_tokenizer(tiny_model_dir)
        tr = Trainer(model, make_grpo(kl_coef=0.1), _Fixed(items),
                     TrainerConfig(dtype="float32", micro_token_budget=budget, max_seq_len=512), tokenizer=tok)
        hists.append(tr.train_step())
    one, many = hists
    assert one["micro_batches"] == 1 and many["micro_batches"] >= 3
    assert one["pg/ratio_max"] > 1.0 + 1e-3 > 1.0 - 1e-3 > one["pg/ratio_min"]
    for key in ("pg/ratio_max", "pg/ratio_min", "pg/ratio_mean", "pg/clip_frac", "pg/loss", "kl/loss", "kl/kl", "loss"):
        assert many[key] == pytest.approx(one[key], rel=1e-4, abs=1e-6), key


def test_ratio_losses_need_actor_logprobs_whoever_builds_the_algorithm(tiny_model_dir, sft_items):
    """A hand-built algorithm with a ratio loss cannot score against zeros: the flag comes from the loss."""
    assert RLAlgorithm("mine", EpisodicReturn(), ClippedSurrogateLoss()).requires_actor_logprobs
    assert RLAlgorithm("kl", EpisodicReturn(), CompositeLoss([("pg", ReinforceLoss(), 1.0),
                                                               ("kl", TokenKLLoss(coef=0.1), 1.0)])
                       ).requires_actor_logprobs
    assert not RLAlgorithm("pg", EpisodicReturn(), ReinforceLoss()).requires_actor_logprobs
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    tr = Trainer(model, RLAlgorithm("mine", EpisodicReturn(), ClippedSurrogateLoss()), _Fixed(sft_items[:4]),
                 TrainerConfig(), tokenizer=tok)
    with pytest.raises(ValueError, match="mine needs the actor's sampling log-probs"):
        tr.train_step()


def test_a_loss_that_does_not_say_whether_it_reads_actor_logprobs_is_refused():
    class Mine:
        needs_entropy = False

        def __call__(self, inputs): raise AssertionError("never called")

    with pytest.raises(ValueError, match="loss Mine must declare `needs_actor_logprobs: bool`"):
        RLAlgorithm("mine", EpisodicReturn(), Mine())
    with pytest.raises(ValueError, match="loss Mine must declare `needs_actor_logprobs: bool`"):
        CompositeLoss([("pg", ReinforceLoss(), 1.0), ("mine", Mine(), 1.0)])


def test_kl_to_the_reference_compares_with_the_starting_weights_even_after_resume(tiny_model_dir, tmp_path):
    """The reference is the model handed to the Trainer, frozen: 0 KL on the first step,
    > 0 once the policy moved, and still the starting weights after a resume from a checkpoint
    (with `kl_to: behaviour` the same term is exactly 0 in synchronous training)."""
    items = _ratio_items()
    for i in items:  # on-policy data: the actor log-probs are the starting model's own
        i.actor_logprobs = None
    cfg = TrainerConfig(dtype="float32", lr=3e-3, micro_token_budget=100_000, max_seq_len=512)

    def trainer(alg):
        model, tok = load_model_and_tokenizer(tiny_model_dir)
        return Trainer(model, alg, _Fixed(items), cfg, tokenizer=tok, checkpoint_dir=tmp_path / alg.loss.terms[1][1].to)

    def on_policy(tr):  # fill the actor log-probs with the policy's current ones (a fresh synchronous batch)
        for item in items:
            ids = torch.tensor([item.input_ids], device=tr.ctx.device)
            with torch.no_grad():
                lp, _ = tr.scorer(ids, torch.ones_like(ids), 0, None, need_entropy=False)
            item.actor_logprobs = [0.0] + lp[0].tolist()

    ref = trainer(make_grpo(kl_coef=0.1, kl_to="reference"))
    assert ref.ref_scorer is not None and not any(p.requires_grad for p in ref.ref_scorer.model.parameters())
    kls = []
    for _ in range(3):
        on_policy(ref)
        kls.append(ref.train_step()["kl/kl"])
    # "0" up to fp32 rounding: on a GPU, GEMMs of other shapes round differently (~2e-6 seen);
    # a moved policy reads 0.29, then 0.81
    assert kls[0] == pytest.approx(0.0, abs=1e-5) and kls[2] > 1e-2
    ref.save_checkpoint()

    resumed = trainer(make_grpo(kl_coef=0.1, kl_to="reference"))  # built from the starting model dir again
    assert resumed.resume()
    on_policy(resumed)
    assert resumed.train_step()["kl/kl"] > 1e-2  # the resumed policy is still compared with the start

    behaviour = trainer(make_grpo(kl_coef=0.1, kl_to="behaviour"))
    assert behaviour.ref_scorer is None
    for _ in range(2):
        on_policy(behaviour)
        assert behaviour.train_step()["kl/kl"] == pytest.approx(0.0, abs=1e-5)
