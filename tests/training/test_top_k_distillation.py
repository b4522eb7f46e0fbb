"""Top-k distillation through the scorer, the teacher and the trainer: the student's and the
teacher's log-probs of the teacher's likeliest tokens, checked against a plain forward."""

import json

import pytest
import torch

from ludic_core.algorithms import DistillTeacher, OnPolicyDistillConfig
from ludic_core.config import TrainerConfig
from ludic_core.recipes.tic_tac_toe import AGENT, ENV
from ludic_core.stages.run import RolloutData, StageSpec, run_stage
from ludic_core.training.scoring import PolicyScorer
from ludic_core.training.teacher import ModelTeacher, with_teacher_logprobs


def _plain(model, ids, temperature=1.0):
    """log-softmax of a plain forward: [B, T-1, V], position t scoring token t + 1."""
    with torch.no_grad():
        return torch.log_softmax(model(ids).logits[:, :-1].float() / temperature, -1)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("with_positions", [True, False])
def test_the_scorer_gives_the_log_probs_of_the_asked_ids(tiny_model_and_tokenizer, fused, temperature,
                                                         with_positions):
    model, _ = tiny_model_and_tokenizer
    scorer = PolicyScorer(model, device_type="cpu", compute_dtype=torch.float32, chunk_tokens=64)
    if not fused:
        scorer.head = None  # the path for models whose logits are not lm_head(hidden)
    torch.manual_seed(0)
    ids = torch.randint(3, 200, (2, 12))
    start = 4
    top_ids = torch.randint(0, 256, (2, 12 - 1 - start, 5))
    temps = torch.full((2,), temperature) if temperature != 1.0 else None
    grid = torch.zeros(2, 12 - start, dtype=torch.bool)
    grid[0, 2] = grid[1, 5] = grid[1, 6] = True  # the scored positions of the [B, T - start] grid
    positions = grid.flatten().nonzero().squeeze(1) if with_positions else None
    top = scorer.score(ids, torch.ones_like(ids), start, temps, False, positions=positions, top_ids=top_ids).top
    want = _plain(model, ids, temperature)[:, start:].gather(-1, top_ids)
    if with_positions and fused:  # only the scored positions are projected; the others read 0
        assert torch.allclose(top[grid[:, :-1]], want[grid[:, :-1]], atol=1e-5)
        assert not top[~grid[:, :-1]].any()
    else:
        assert torch.allclose(top, want, atol=1e-5)


def test_the_student_top_log_probs_carry_the_gradient(tiny_model_and_tokenizer):
    from ludic_core.models import load_model_and_tokenizer

    model, _ = load_model_and_tokenizer(tiny_model_and_tokenizer[0].name_or_path)
    scorer = PolicyScorer(model, device_type="cpu", compute_dtype=torch.float32, chunk_tokens=64)
    ids = torch.randint(3, 200, (1, 8))
    top = scorer.score(ids, torch.ones_like(ids), 2, None, False, top_ids=torch.zeros(1, 5, 3, dtype=torch.long)).top
    top.sum().backward()
    assert model.get_output_embeddings().weight.grad.abs().sum() > 0


def test_a_model_teacher_gives_its_likeliest_tokens_as_a_plain_forward_does(tiny_model_and_tokenizer, sft_items):
    model, tok = tiny_model_and_tokenizer
    items = sft_items[:5]
    got = ModelTeacher(model, pad_id=tok.pad_token_id).score_top_k(items, 4)
    one_row = ModelTeacher(model, pad_id=tok.pad_token_id, token_budget=1).score_top_k(items, 4)
    sampled = ModelTeacher(model, pad_id=tok.pad_token_id).score(items)
    for item, (values, ids, lps), (_, ids1, _), want_sampled in zip(items, got, one_row, sampled):
        logp = _plain(model, torch.tensor([item.input_ids]))[0]
        assert values == pytest.approx(want_sampled, abs=1e-4)  # the sampled tokens as `score` gives them
        assert ids == ids1
        for k in range(1, len(item)):
            if not item.action_mask[k]:
                assert ids[k] == [0] * 4 and lps[k] == [0.0] * 4
                continue
            top = logp[k - 1].topk(4)
            assert ids[k] == top.indices.tolist() and lps[k] == pytest.approx(top.values.tolist(), abs=1e-4)


def test_a_model_teacher_picks_only_ids_the_student_can_sample(tiny_model_and_tokenizer, sft_items):
    model, tok = tiny_model_and_tokenizer
    item = sft_items[0]
    (_, ids, _), = ModelTeacher(model, pad_id=tok.pad_token_id, student_rows=50).score_top_k([item], 8)
    assert max(max(row) for row in ids) < 50


def test_a_teacher_without_top_tokens_is_refused_naming_it(sft_items):
    class SampledOnly:
        def score(self, items):
            return [[0.0] * len(i) for i in items]

    with pytest.raises(ValueError, match="SampledOnly does not give.*model_path"):
        with_teacher_logprobs(SampledOnly(), sft_items[:2], top_k=4)


def test_top_k_rows_that_are_not_log_probs_name_the_item(sft_items):
    class Broken:
        def score(self, items):
            return [[0.0] * len(i) for i in items]

        def score_top_k(self, items, k):
            return [([0.0] * len(i), [[1, 1]] * len(i), [[-0.1, -0.2]] * len(i)) for i in items]

    with pytest.raises(ValueError, match="not distinct ids"):
        with_teacher_logprobs(Broken(), sft_items[:1], top_k=2)


def test_the_vllm_teacher_is_refused_with_top_k():
    with pytest.raises(ValueError, match="vLLM teacher .*does not give"):
        OnPolicyDistillConfig(teacher=DistillTeacher(base_url="http://127.0.0.1:1/v1"), top_k=8)


def _distill(student, teacher, tmp_path, steps, requests, temperature=1.0, top_k=256, **trainer):
    cfg = OnPolicyDistillConfig(teacher=DistillTeacher(model_path=str(teacher)), top_k=top_k)
    agent = AGENT.model_copy(update={"sampling": AGENT.sampling.model_copy(update={"temperature": temperature})})
    spec = StageSpec(model_path=str(student), checkpoint_dir=str(tmp_path / "ckpt"), algorithm=cfg,
                     trainer=TrainerConfig(lr=3e-3, dtype="float32", max_seq_len=512, **trainer),
                     data=RolloutData(env=ENV, agent=agent, requests_per_step=requests), until_step=steps,
                     metrics_path=str(tmp_path / "m.jsonl"))
    assert run_stage(spec)["step"] == steps
    return [json.loads(line) for line in (tmp_path / "m.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("temperature, top_k", [(1.0, 256), (0.7, 256), (1.0, 8)])
def test_a_student_distilled_from_itself_has_no_kl(tiny_model_dir, tmp_path, temperature, top_k):
    """The teacher's top-k and the student's log-probs of the same ids line up position by
    position, at the sampling temperature: from its own weights the KL is 0 up to float error (a
    shift by one position, or an untempered side, would put it far from 0)."""
    (row,) = _distill(tiny_model_dir, tiny_model_dir, tmp_path, steps=1, requests=4, temperature=temperature,
                      top_k=top_k)
    assert abs(row["teacher_kl"]) < 1e-4 and abs(row["sampled_teacher_kl"]) < 1e-3, row
    assert 0.0 < row["teacher_top_mass"] <= 1.0 + 1e-4
    if top_k == 256:  # the whole byte vocabulary and the specials past it: nearly all of the mass
        assert row["teacher_top_mass"] > 0.95


def test_packing_is_refused_naming_the_setting(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="padded rows only: set trainer.packing false"):
        _distill(tiny_model_dir, tiny_model_dir, tmp_path, steps=1, requests=2, packing=True)


def test_top_k_distillation_moves_the_student_toward_its_teacher(tiny_model_dir, format_tuned_model_dir, tmp_path,
                                                                device):
    """An untrained student distilled from the format-tuned model on its own replies: the exact
    KL over the teacher's top 16 (and the rest), on each step's fresh samples, falls (5.3 to 3.6
    nats a token in 20 steps on the CPU; the assertion asks for a quarter there, and for a fifth on
    a GPU, whose bf16 teacher gave a last-5 mean of 0.754 of the first 3's on an H200)."""
    kl = [r["teacher_kl"] for r in _distill(tiny_model_dir, format_tuned_model_dir, tmp_path, steps=20, requests=16,
                                            top_k=16)]
    assert all(k > 0 for k in kl)
    assert sum(kl[-5:]) / 5 < (0.75 if device.type == "cpu" else 0.8) * sum(kl[:3]) / 3, kl


def test_a_custom_algorithm_can_name_the_top_k_loss_with_an_in_process_teacher_only(tiny_model_dir):
    from ludic_core.algorithms import CustomConfig
    from ludic_core.compose.build import check_algorithm

    named = CustomConfig(credit="constant", loss="distillation_top_k", loss_kwargs={"teacher_top_k": 8},
                         teacher={"model_path": str(tiny_model_dir)})
    check_algorithm(named)
    assert named.build().teacher_top_k == 8
    served = named.model_copy(update={"teacher": DistillTeacher(base_url="http://127.0.0.1:1/v1")})
    with pytest.raises(ValueError, match="top 8 tokens .*vLLM teacher .*model_path"):
        check_algorithm(served)


def test_the_forward_divergence_needs_top_k():
    with pytest.raises(ValueError, match="divergence 'forward' needs top_k"):
        OnPolicyDistillConfig(teacher=DistillTeacher(model_path="x"), divergence="forward")
    cfg = OnPolicyDistillConfig(teacher=DistillTeacher(model_path="x"), top_k=4, divergence="forward")
    assert cfg.build().loss.divergence == "forward"


def test_chunked_top_log_probs_and_their_gradients_equal_one_pass(tiny_model_and_tokenizer):
    """`chunk_tokens` positions at a time, recomputed in backward: the same values and gradients."""
    from ludic_core.models import load_model_and_tokenizer

    got = {}
    for chunk in (3, 4096):
        model, _ = load_model_and_tokenizer(tiny_model_and_tokenizer[0].name_or_path)
        scorer = PolicyScorer(model, device_type="cpu", compute_dtype=torch.float32, chunk_tokens=chunk)
        torch.manual_seed(0)
        ids = torch.randint(3, 200, (2, 12))
        top_ids = torch.randint(0, 256, (2, 12 - 1 - 2, 4))
        top = scorer.score(ids, torch.ones_like(ids), 2, torch.tensor([0.8, 1.0]), False, top_ids=top_ids).top
        (top * torch.linspace(-1, 1, top.numel()).reshape(top.shape)).sum().backward()
        got[chunk] = (top.detach(), model.get_output_embeddings().weight.grad.clone())
    assert torch.allclose(got[3][0], got[4096][0], atol=1e-6)
    assert torch.allclose(got[3][1], got[4096][1], atol=1e-6)


def test_an_item_whose_first_token_is_an_action_is_scored(tiny_model_and_tokenizer):
    """Position 0 is never predicted: its top-k row stays empty and is not checked."""
    from ludic_core.batching.saw import SAWItem

    model, tok = tiny_model_and_tokenizer
    item = SAWItem([5, 6, 7, 8], [1] * 4, [1, 1, 1, 1], 1.0, {"i": 0})
    (scored,), _ = with_teacher_logprobs(ModelTeacher(model, pad_id=tok.pad_token_id), [item], top_k=3)
    assert scored.teacher_top_ids[0] == [0, 0, 0] and len(set(scored.teacher_top_ids[1])) == 3


def test_top_k_is_bounded():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="top_k"):
        OnPolicyDistillConfig(teacher=DistillTeacher(model_path="x"), top_k=4096)
