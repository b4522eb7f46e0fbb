"""On-policy distillation: the per-token credit and the loss, by hand."""

import math

import pytest
import torch

from ludic_core.losses import LossInputs, OnPolicyDistillLoss, distillation_advantages

# One item of 4 positions: the prompt (mask 0, where old and teacher log-probs are arbitrary,
# even -inf), two sampled tokens, and padding.
OLD = [[-5.0, -1.0, -2.0, -math.inf]]
TEACHER = [[-math.inf, -0.5, -3.0, -math.inf]]
MASK = [[0.0, 1.0, 1.0, 0.0]]


def make_inputs(log_ratio=(0.0, 0.0), advantage=0.0, teacher=TEACHER):
    lp = torch.tensor([[-5.0, -1.0 + log_ratio[0], -2.0 + log_ratio[1], -1.0]], requires_grad=True)
    return LossInputs(logprobs=lp, old_logprobs=torch.tensor(OLD), mask=torch.tensor(MASK),
                      advantages=torch.tensor([advantage]), num_tokens=2.0, num_sequences=1.0,
                      teacher_logprobs=None if teacher is None else torch.tensor(teacher))


def test_the_per_token_credit_is_the_teacher_minus_the_sampler():
    # token 1: -0.5 - (-1.0) = +0.5 (the teacher likes it more); token 2: -3.0 - (-2.0) = -1.0
    adv = distillation_advantages(make_inputs(), teacher_coef=1.0, reward_coef=0.0)
    assert adv.tolist() == [[0.0, 0.5, -1.0, 0.0]]  # exactly 0 off the mask, never NaN from -inf
    # teacher_coef 2, and the env's credit 0.5 * 3.0 added to every action token
    adv = distillation_advantages(make_inputs(advantage=3.0), teacher_coef=2.0, reward_coef=0.5)
    assert adv.tolist() == [[0.0, 1.0 + 1.5, -2.0 + 1.5, 0.0]]


def test_loss_gradient_and_metrics_at_ratio_one():
    # r = 1: values -A = [-0.5, +1.0], token mean over num_tokens 2 -> 0.25;
    # gradient d(-r A)/dlp = -r A / 2 = [-0.25, +0.5]
    inputs = make_inputs()
    out = OnPolicyDistillLoss()(inputs)
    assert out.loss.item() == pytest.approx(0.25)
    out.loss.backward()
    assert inputs.logprobs.grad[0].tolist() == pytest.approx([0.0, -0.25, 0.5, 0.0])
    m = out.metrics
    assert float(m["teacher_kl"]) == pytest.approx(((-1.0 + 0.5) + (-2.0 + 3.0)) / 2)  # sampler - teacher
    assert float(m["teacher_logprob"]) == pytest.approx((-0.5 - 3.0) / 2)
    assert float(m["token_advantage"]) == pytest.approx((0.5 - 1.0) / 2)
    assert float(m["clip_frac"]) == 0.0 and float(m["ratio_mean"]) == pytest.approx(1.0)


def test_clipping_stops_a_token_that_moved_past_the_range():
    # token 1: A = +0.5, r = 1.5 > 1.2: -min(0.75, 0.6) = -0.6, no gradient;
    # token 2: A = -1.0, r = e^-0.1 = 0.905 inside: -(-0.905) = +0.905, gradient -r A / 2 = +0.452
    inputs = make_inputs(log_ratio=(math.log(1.5), -0.1))
    out = OnPolicyDistillLoss()(inputs)
    assert out.loss.item() == pytest.approx((-0.6 + math.exp(-0.1)) / 2)
    out.loss.backward()
    assert inputs.logprobs.grad[0].tolist() == pytest.approx([0.0, 0.0, math.exp(-0.1) / 2, 0.0])
    assert float(out.metrics["clip_frac"]) == pytest.approx(0.5)


def test_the_credit_uses_the_sampler_not_the_current_weights():
    """A reused batch (ratio != 1) keeps the credit it was sampled with."""
    a = distillation_advantages(make_inputs(), 1.0, 0.0)
    b = distillation_advantages(make_inputs(log_ratio=(0.3, -0.7)), 1.0, 0.0)
    assert torch.equal(a, b)


def test_without_teacher_logprobs_the_loss_names_what_is_missing():
    with pytest.raises(ValueError, match="teacher_logprobs is None.*Trainer\\(teacher="):
        OnPolicyDistillLoss()(make_inputs(teacher=None))


def test_misshapen_teacher_logprobs_are_refused():
    with pytest.raises(ValueError, match="teacher_logprobs has shape"):
        OnPolicyDistillLoss()(make_inputs(teacher=[[0.0, -1.0]]))


@pytest.mark.parametrize("kwargs, match", [
    ({"teacher_coef": 0.0, "reward_coef": 0.0}, "both 0"),
    ({"teacher_coef": -1.0}, ">= 0"),
    ({"clip_low": 1.0}, "clip_low"),
])
def test_bad_settings_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OnPolicyDistillLoss(**kwargs)


def test_declares_what_the_trainer_must_provide():
    from ludic_core.losses import CompositeLoss, TokenKLLoss, is_inert, wants_teacher

    loss = OnPolicyDistillLoss()
    assert loss.needs_actor_logprobs and wants_teacher(loss) and not is_inert(loss)
    assert wants_teacher(CompositeLoss([("d", loss, 1.0), ("kl", TokenKLLoss(), 0.1)]))
    assert not wants_teacher(TokenKLLoss())
