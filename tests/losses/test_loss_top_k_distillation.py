"""Top-k distillation: the reverse KL over the teacher's likeliest tokens and the rest, by hand."""

import math

import pytest
import torch

from ludic_core.losses import (
    CompositeLoss,
    LossInputs,
    TokenKLLoss,
    TopKDistillLoss,
    top_k_forward_kl,
    top_k_reverse_kl,
)
from ludic_core.losses.flags import teacher_top_k

LN2 = math.log(2.0)


def make_inputs(student, teacher, mask=(0.0, 1.0), advantage=0.0, log_ratio=0.0):
    """One item of 2 positions (a prompt position, then one action token), K = len(student[0])."""
    k = len(student[0])
    st = torch.tensor([student], dtype=torch.float32, requires_grad=True)  # [1, 2, K]
    old = torch.tensor([[0.0, -1.0]])
    return LossInputs(logprobs=old + torch.tensor([[0.0, log_ratio]]), old_logprobs=old, mask=torch.tensor([mask]),
                      advantages=torch.tensor([advantage]), num_tokens=1.0, num_sequences=1.0,
                      teacher_logprobs=torch.tensor([[0.0, -1.5]]),
                      teacher_top_logprobs=torch.tensor([teacher], dtype=torch.float32).reshape(1, 2, k),
                      student_top_logprobs=st)


def test_the_kl_counts_the_rest_of_the_vocabulary_as_one_outcome():
    # student over (a, b, rest) = (1/2, 1/4, 1/4), teacher (1/4, 1/2, 1/4):
    # 1/2 ln 2 + 1/4 ln(1/2) + 1/4 ln 1 = ln2 / 4
    s = torch.tensor([math.log(0.5), math.log(0.25)], requires_grad=True)
    t = torch.tensor([math.log(0.25), math.log(0.5)])
    kl = top_k_reverse_kl(s, t)
    assert kl.item() == pytest.approx(LN2 / 4)
    # d/ds_k = p_k (s_k - t_k - ln r_s + ln r_t): (1/2)(ln 2) and (1/4)(-ln 2)
    kl.backward()
    assert s.grad.tolist() == pytest.approx([LN2 / 2, -LN2 / 4])


def test_with_the_whole_vocabulary_it_is_the_exact_reverse_kl():
    torch.manual_seed(0)
    s, t = torch.log_softmax(torch.randn(3, 7), -1), torch.log_softmax(torch.randn(3, 7), -1)
    want = (s.exp() * (s - t)).sum(-1)
    assert top_k_reverse_kl(s, t).tolist() == pytest.approx(want.tolist(), abs=1e-5)
    assert top_k_reverse_kl(s, s).abs().max().item() < 1e-6  # the teacher itself: no loss


def test_the_forward_kl_is_the_teachers_cross_entropy_over_the_same_outcomes():
    # teacher over (a, b, rest) = (1/4, 1/2, 1/4), student (1/2, 1/4, 1/4):
    # 1/4 ln(1/2) + 1/2 ln 2 + 1/4 ln 1 = ln2 / 4
    s = torch.tensor([math.log(0.5), math.log(0.25)], requires_grad=True)
    t = torch.tensor([math.log(0.25), math.log(0.5)])
    kl = top_k_forward_kl(s, t)
    assert kl.item() == pytest.approx(LN2 / 4)
    # d/ds_k = -p_t(k) + r_t p_s(k) / r_s: -1/4 + 1/2 and -1/2 + 1/4
    kl.backward()
    assert s.grad.tolist() == pytest.approx([0.25, -0.25])
    torch.manual_seed(1)
    full_s, full_t = torch.log_softmax(torch.randn(3, 7), -1), torch.log_softmax(torch.randn(3, 7), -1)
    want = (full_t.exp() * (full_t - full_s)).sum(-1)
    assert top_k_forward_kl(full_s, full_t).tolist() == pytest.approx(want.tolist(), abs=1e-5)


def test_the_loss_takes_the_forward_divergence_by_name():
    student = [[0.0, 0.0], [math.log(0.5), math.log(0.125)]]
    teacher = [[0.0, 0.0], [math.log(0.25), math.log(0.5)]]
    rev = TopKDistillLoss(teacher_top_k=2)(make_inputs(student, teacher)).loss.item()
    fwd = TopKDistillLoss(teacher_top_k=2, divergence="forward")(make_inputs(student, teacher)).loss.item()
    assert rev == pytest.approx(0.5 * math.log(2) + 0.125 * math.log(0.25) + 0.375 * math.log(1.5))
    assert fwd == pytest.approx(0.25 * math.log(0.5) + 0.5 * math.log(4) + 0.25 * math.log(1 / 1.5))


def test_mass_parked_off_the_teachers_top_k_is_paid_for():
    """A KL renormalised over the top K alone would be 0 here: the student matches the teacher's
    ratio a:b but puts 98% of its mass elsewhere, where the teacher puts 1%."""
    s = torch.tensor([math.log(0.01), math.log(0.01)])
    t = torch.tensor([math.log(0.495), math.log(0.495)])
    want = 2 * 0.01 * math.log(0.01 / 0.495) + 0.98 * math.log(0.98 / 0.01)
    assert top_k_reverse_kl(s, t).item() == pytest.approx(want, rel=1e-5)  # float32
    assert want > 4.0


def test_the_loss_is_the_token_mean_of_the_kl_on_action_positions():
    # the prompt position holds garbage (log-probs summing past 1): masked out, not NaN
    student = [[0.0, 0.0], [math.log(0.5), math.log(0.25)]]
    teacher = [[0.0, 0.0], [math.log(0.25), math.log(0.5)]]
    inputs = make_inputs(student, teacher)
    out = TopKDistillLoss(teacher_top_k=2)(inputs)
    assert out.loss.item() == pytest.approx(LN2 / 4)
    out.loss.backward()
    assert inputs.student_top_logprobs.grad[0].flatten().tolist() == pytest.approx([0.0, 0.0, LN2 / 2, -LN2 / 4])
    assert float(out.metrics["teacher_kl"]) == pytest.approx(LN2 / 4)
    assert float(out.metrics["teacher_top_mass"]) == pytest.approx(0.75)
    assert float(out.metrics["sampled_teacher_kl"]) == pytest.approx(-1.0 + 1.5)  # sampler - teacher, sampled token
    # teacher_coef scales it
    assert TopKDistillLoss(teacher_top_k=2, teacher_coef=2.0)(make_inputs(student, teacher)).loss.item() == \
        pytest.approx(LN2 / 2)


def test_the_envs_credit_adds_a_clipped_surrogate():
    # KL ln2/4, plus reward_coef 0.5 x advantage 2 = A 1 at ratio e^0.5 > 1.2: -min(1.65, 1.2) = -1.2
    student = [[0.0, 0.0], [math.log(0.5), math.log(0.25)]]
    teacher = [[0.0, 0.0], [math.log(0.25), math.log(0.5)]]
    out = TopKDistillLoss(teacher_top_k=2, reward_coef=0.5)(make_inputs(student, teacher, advantage=2.0,
                                                                         log_ratio=0.5))
    assert out.loss.item() == pytest.approx(LN2 / 4 - 1.2)
    assert float(out.metrics["clip_frac"]) == pytest.approx(1.0)


def test_missing_or_misshapen_top_k_inputs_are_named():
    student = [[0.0, 0.0], [math.log(0.5), math.log(0.25)]]
    inputs = make_inputs(student, student)
    inputs.student_top_logprobs = None
    with pytest.raises(ValueError, match="student_top_logprobs is None"):
        TopKDistillLoss(teacher_top_k=2)(inputs)
    inputs = make_inputs(student, student)
    inputs.teacher_top_logprobs = torch.zeros(1, 3, 2)
    with pytest.raises(ValueError, match=r"teacher_top_logprobs must be \[B, T, K\]"):
        TopKDistillLoss(teacher_top_k=2)(inputs)


@pytest.mark.parametrize("kwargs, match", [
    ({"teacher_top_k": 0}, "teacher_top_k"),
    ({"teacher_top_k": True}, "teacher_top_k"),
    ({"teacher_coef": 0.0}, "teacher_coef must be > 0"),
    ({"divergence": "jsd"}, "divergence must be"),
    ({"clip_low": 1.0}, "clip_low"),
])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        TopKDistillLoss(**kwargs)


def test_the_k_reaches_the_trainer_through_a_composite_too():
    loss = TopKDistillLoss(teacher_top_k=16)
    assert teacher_top_k(loss) == 16 and teacher_top_k(TokenKLLoss()) is None
    assert CompositeLoss([("d", loss, 1.0), ("kl", TokenKLLoss(), 0.1)]).teacher_top_k == 16
    with pytest.raises(ValueError, match="different K"):
        CompositeLoss([("a", loss, 1.0), ("b", TopKDistillLoss(teacher_top_k=8), 1.0)])
