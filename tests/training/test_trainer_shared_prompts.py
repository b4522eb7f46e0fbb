"""Rows that open with the same prompt run it once (`shared_prefix`), and the step is the one
that scores every row whole: the same log-probs and gradient, for every loss, with a KL
reference and an entropy term, for prompts and completions of different lengths and
multi-turn items."""

import logging

import pytest
import torch

from ludic_core.algorithms import make_cispo, make_grpo, make_gspo, make_reinforce, make_sft
from ludic_core.batching.saw import SAWBatch, SAWItem
from ludic_core.config import LoRAConfig
from ludic_core.training.shared_prefix import plan_shared_prefix
from tests.training.test_trainer_skip import _assert_same_grads, _step_with_grads, _sync_count, _trainer

pytestmark = pytest.mark.usefixtures("cpu_forward_cost")


def test_the_plan_of_two_prompts_by_hand():
    """Rows 0 and 2 open with [5, 6, 7], row 1 with [5, 6]; tokens after a row's first action
    token (the 1s of its action mask) are its own."""
    ids = torch.tensor([[5, 6, 7, 20, 21, 0], [5, 6, 30, 31, 32, 33], [5, 6, 7, 40, 0, 0]])
    attention = torch.tensor([[1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]])
    action = torch.tensor([[0, 0, 0, 1, 1, 0], [0, 0, 1, 1, 0, 1], [0, 0, 0, 1, 0, 0]])
    plan = plan_shared_prefix(ids, attention, action, 1, pad_id=0, min_saved=0)
    assert plan.prefix_ids.tolist() == [[5, 6, 7], [5, 6, 0]]
    assert plan.prefix_mask.tolist() == [[1, 1, 1], [1, 1, 0]]
    assert plan.row_prompt.tolist() == [0, 1, 0]
    assert plan.suffix_ids.tolist() == [[20, 21, 0, 0], [30, 31, 32, 33], [40, 0, 0, 0]]
    assert plan.suffix_mask.tolist() == [[1, 1, 1, 1, 1, 0, 0], [1, 1, 0, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0, 0]]
    assert plan.suffix_positions.tolist() == [[3, 4, 5, 6], [2, 3, 4, 5], [3, 4, 5, 6]]
    # the source: 2 x 3 prompt positions (prompt g's position p at 3g + p), then 3 x 4 suffix
    # positions (row r's j-th at 6 + 4r + j), then the zero row (18). Column c is position 1 + c:
    # the prompt's last position, then the row's own
    assert plan.gather.tolist() == [[18, 2, 6, 7, 18], [4, 10, 11, 12, 13], [18, 2, 14, 18, 18]]
    assert plan.saved_positions == 3  # one more row opens with [5, 6, 7]
    assert plan_shared_prefix(ids, attention, action, 1, pad_id=0, min_saved=4) is None  # saves too little
    holed = attention.clone()
    holed[0, 1] = 0
    assert plan_shared_prefix(ids, holed, action, 1, pad_id=0, min_saved=0) is None  # not right-padded
    action[1] = 0
    assert plan_shared_prefix(ids, attention, action, 1, pad_id=0, min_saved=0) is None  # a row without actions


WEIGHTS = [1.0, -1.0, 0.5, -0.5, 0.25, 1.0, -1.0, 0.75, -0.25]


def _groups(weights=WEIGHTS, multi_turn: bool = False) -> list[SAWItem]:
    """Three prompts (60, 68 and 76 tokens), three completions of each (3 to 11 tokens); with
    `multi_turn` each completion is an action, an observation of 5 tokens, a second action.
    Recorded actor log-probs are far from the model's: ratios are not 1, some clip."""
    g = torch.Generator().manual_seed(3)
    items = []
    for i, w in enumerate(weights):
        prompt = torch.randint(4, 200, (60 + 8 * (i // 3),), generator=torch.Generator().manual_seed(i // 3)).tolist()
        first = torch.randint(4, 200, (3 + (5 * i) % 9,), generator=g).tolist()
        mask = [0] * len(prompt) + [1] * len(first)
        ids = prompt + first
        if multi_turn:
            obs, second = torch.randint(4, 200, (5,), generator=g).tolist(), torch.randint(4, 200, (4,), generator=g).tolist()
            ids, mask = ids + obs + second, mask + [0] * 5 + [1] * 4
        lps = [0.0 if m == 0 else -float(x) for m, x in zip(mask, torch.rand(len(ids), generator=g) * 6)]
        items.append(SAWItem(ids, [1] * len(ids), mask, w, {"sampling_temperature": 0.7}, actor_logprobs=lps))
    return items


ALGORITHMS = {
    "grpo": lambda: make_grpo(),
    "grpo_sequence_reduction": lambda: make_grpo(loss_reduction="sequence"),
    "gspo": lambda: make_gspo(clip_low=0.5, clip_high=2.0),
    "cispo": lambda: make_cispo(),
    "reinforce": lambda: make_reinforce(),
    "grpo_kl": lambda: make_grpo(kl_coef=0.1),  # the reference model's log-probs share prompts too
    "grpo_entropy": lambda: make_grpo(entropy_coef=0.01),
    "grpo_lora": lambda: make_grpo(),  # adapters on the attention projections (`_trainer` below)
    "sft": lambda: make_sft(),  # a demonstration's turns share their openings too
}


@pytest.mark.parametrize("multi_turn", [False, True], ids=["one_turn", "multi_turn"])
@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_shared_prompts_leave_the_step_unchanged(tiny_model_dir, name, multi_turn):
    batch = SAWBatch(_groups(multi_turn=multi_turn))
    steps = {}
    for share in (True, False):
        lora = {"lora": LoRAConfig(r=4)} if name.endswith("lora") else {}
        tr = _trainer(tiny_model_dir, ALGORITHMS[name](), batch, skip=True, share_prompts=share, **lora)
        ref_shared = []
        if tr.ref_scorer is not None:  # its head verified now (else on its first micro-batch), so it shares too
            with torch.no_grad():
                tr.ref_scorer(torch.tensor([batch.items[0].input_ids], device=tr.ctx.device), None, 0, None, False)
            shared_call = tr.ref_scorer.shared_prefix_scores
            tr.ref_scorer.shared_prefix_scores = lambda *a, **k: ref_shared.append(1) or shared_call(*a, **k)
        steps[share] = _step_with_grads(tr)  # the first step: from the same weights, and already shared
        assert len(ref_shared) == (1 if share and name == "grpo_kl" else 0)
    (on, g_on), (off, g_off) = steps[True], steps[False]
    _assert_same_grads(g_on, g_off)
    assert on["loss"] == pytest.approx(off["loss"], rel=1e-5, abs=1e-7)
    for key in ("ratio_mean", "ratio_max", "clip_frac", "approx_kl"):
        if key in off:
            assert on[key] == pytest.approx(off[key], rel=1e-4, abs=1e-6), key
    # 6 rows open with a prompt another row opened with: 2 x (60 + 68 + 76)
    assert on["shared_prompt_positions"] == 2 * (60 + 68 + 76) and off["shared_prompt_positions"] == 0.0


def test_a_shared_prompt_runs_once_forward(tiny_model_dir):
    """The training forwards: the three prompts once ([3, 76] right-padded), then the nine rows'
    own tokens against them, instead of nine whole rows."""
    tr = _trainer(tiny_model_dir, make_grpo(), SAWBatch(_groups()), skip=True)
    tr.train_step()
    shapes: list[tuple[int, int]] = []
    tr.model.register_forward_pre_hook(
        lambda _m, _a, kw: shapes.append(tuple(kw["input_ids"].shape)) if torch.is_grad_enabled() else None,
        with_kwargs=True)
    tr.train_step()
    assert shapes == [(3, 76), (9, 11)]


def test_a_model_that_scores_shared_prompts_differently_is_scored_whole(tiny_model_dir, caplog, monkeypatch):
    """The layout is checked once against whole rows; where they differ the trainer warns and
    scores whole rows from then on."""
    from ludic_core.training.scoring import PolicyScorer

    real = PolicyScorer.shared_prefix_logprobs

    def off_by_a_little(self, *args, **kwargs):
        logprobs, entropy = real(self, *args, **kwargs)
        return logprobs + 0.01, entropy

    monkeypatch.setattr(PolicyScorer, "shared_prefix_logprobs", off_by_a_little)
    batch = SAWBatch(_groups())
    tr = _trainer(tiny_model_dir, make_grpo(), batch, batch, skip=True)
    with caplog.at_level(logging.WARNING):
        tr.train_step()
        m = tr.train_step()
    assert "scores rows differently when their shared prompt runs once" in caplog.text
    assert not tr.batcher.share_prompts and m["shared_prompt_positions"] == 0.0


def test_sharing_is_off_where_a_forward_cannot_keep_a_cache(tiny_model_dir):
    """Activation checkpointing drops the KV cache; a compiled layer is not tried with one. The
    flag is decided at construction, so the compiled trainer takes no step here (inductor's ~35 s;
    test_trainer_compile.py trains compiled steps)."""
    for cfg in ({"grad_checkpointing": True}, {"compile": True}, {"share_prompts": False}):
        tr = _trainer(tiny_model_dir, make_grpo(), SAWBatch(_groups()), skip=True, **cfg)
        assert not tr.batcher.share_prompts, cfg
        if "compile" not in cfg:
            assert tr.train_step()["shared_prompt_positions"] == 0.0


def test_a_shared_prompt_step_still_reads_the_device_twice(tiny_model_dir, monkeypatch):
    """Sharing adds no host read inside a step (the once-per-run check runs in the first step)."""
    count, where, _, metrics = _sync_count(tiny_model_dir, 100_000, monkeypatch, items=_groups())
    assert metrics["shared_prompt_positions"] > 0
    assert (count, where) == (2, ["tolist", "__float__"])


def test_activation_checkpointing_trains_to_the_same_gradient(tiny_model_dir):
    """`grad_checkpointing` recomputes each layer in the backward instead of keeping its
    activations: the same gradient (and, with it, whole rows instead of shared prompts)."""
    batch = SAWBatch(_groups())
    trainers = [_trainer(tiny_model_dir, make_grpo(), batch, skip=True, grad_checkpointing=c) for c in (True, False)]
    assert [t.model.is_activation_checkpointing for t in trainers] == [True, False]
    (on, g_on), (off, g_off) = (_step_with_grads(t) for t in trainers)
    _assert_same_grads(g_on, g_off)
    assert on["shared_prompt_positions"] == 0.0 and off["shared_prompt_positions"] > 0


def test_a_model_that_cannot_run_a_shared_prompt_is_scored_whole(tiny_model_dir, caplog, monkeypatch):
    """A forward or cache that fails the shared layout (here: a cache that cannot be reordered)
    costs a warning, not the run."""
    from transformers import DynamicCache

    def unsupported(self, beam_idx):
        raise NotImplementedError("no reordering here")

    monkeypatch.setattr(DynamicCache, "reorder_cache", unsupported)
    tr = _trainer(tiny_model_dir, make_grpo(), SAWBatch(_groups()), skip=True)
    with caplog.at_level(logging.WARNING):
        m = tr.train_step()
    assert "cannot run a shared prompt once (NotImplementedError: no reordering here)" in caplog.text
    assert not tr.batcher.share_prompts and m["shared_prompt_positions"] == 0.0 and m["micro_batches"] == 1
