"""GSPO: one length-normalised ratio per sequence, sequence reduction, by hand."""

import math

import pytest
import torch

from ludic_core.losses import ClippedSurrogateLoss, GSPOLoss, LossInputs

E = math.exp
LOGPROBS = [[-1.0, -0.5, -2.0], [-0.7, -1.2, -3.0]]
MASK = [[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]  # lengths 3 and 2


def make_inputs(log_ratio, advantages):
    lp = torch.tensor(LOGPROBS, requires_grad=True)
    return LossInputs(
        logprobs=lp,
        old_logprobs=torch.tensor(LOGPROBS) - torch.tensor(log_ratio),
        mask=torch.tensor(MASK),
        advantages=torch.tensor(advantages),
        num_tokens=5.0,
        num_sequences=2.0,
    )


def test_sequence_ratio_clip_and_gradient():
    # clip range [0.95, 1.05] (wide, for readable numbers)
    # row 0: log-ratios [0.03, 0, 0] -> mean 0.01 -> s0 = e^0.01 = 1.01005 (inside); A = 1
    #        value per token -s0 -> sequence mean -1.01005
    # row 1: log-ratios [0.2, 0, pad 5.0] -> mean over action tokens 0.1 -> s1 = e^0.1 = 1.10517
    #        > 1.05, A = 2: -min(2 * 1.10517, 2 * 1.05) = -2.1 (clipped)
    # loss = (-1.01005 - 2.1) / num_sequences 2 = -1.555025
    inputs = make_inputs([[0.03, 0.0, 0.0], [0.2, 0.0, 5.0]], [1.0, 2.0])
    out = GSPOLoss(clip_low=0.05, clip_high=0.05)(inputs)
    assert out.loss.item() == pytest.approx((-E(0.01) - 2.1) / 2)
    assert out.loss.item() == pytest.approx(-1.555025, abs=1e-6)
    # gradient: row 0 d/dlp_t = -A s0 / len / 2 = -1.01005 / 3 / 2 = -0.168342 for EVERY
    # token, although its token ratios differ (e^0.03, 1, 1); row 1 clipped -> 0.
    out.loss.backward()
    g = -E(0.01) / 6
    assert torch.allclose(inputs.logprobs.grad, torch.tensor([[g, g, g], [0.0, 0.0, 0.0]]))
    assert out.metrics["clip_frac"] == pytest.approx(0.5)
    assert out.metrics["seq_ratio_mean"] == pytest.approx((E(0.01) + E(0.1)) / 2)


def test_default_clip_is_tiny():
    # default range [1 - 3e-4, 1 + 4e-4]: s0 = e^0.01 = 1.01005 > 1.0004 with A = 1 -> clipped
    inputs = make_inputs([[0.03, 0.0, 0.0], [0.0, 0.0, 0.0]], [1.0, 1.0])
    out = GSPOLoss()(inputs)
    # loss = (-1.0004 - 1) / 2
    assert out.loss.item() == pytest.approx((-1.0004 - 1.0) / 2)
    assert out.metrics["clip_frac"] == 0.5


def test_on_policy_gradient_is_uniform_per_sequence_and_differs_from_token_level():
    # logprobs == old: s = 1, loss = -(A0 + A1) / 2 = -(1 - 1) / 2 = 0
    # GSPO grad = -A_i / len_i / 2: row 0 -1/6 for 3 tokens, row 1 +1/4 for 2 tokens
    inputs = make_inputs([[0.0] * 3, [0.0] * 3], [1.0, -1.0])
    out = GSPOLoss()(inputs)
    out.loss.backward()
    assert out.loss.item() == pytest.approx(0.0)
    expected = torch.tensor([[-1 / 6] * 3, [0.25, 0.25, 0.0]])
    assert torch.allclose(inputs.logprobs.grad, expected)
    # the token-level clipped surrogate weights tokens, not sequences: -A / num_tokens 5
    token = make_inputs([[0.0] * 3, [0.0] * 3], [1.0, -1.0])
    ClippedSurrogateLoss()(token).loss.backward()
    assert torch.allclose(token.logprobs.grad, torch.tensor([[-0.2] * 3, [0.2, 0.2, 0.0]]))
