"""CISPO: detached, capped IS weight times REINFORCE, by hand."""

import math

import pytest
import torch

from ludic_core.losses import CISPOLoss, LossInputs

LN4 = math.log(4.0)
E1 = math.exp(-1.0)
LOGPROBS = [[-1.0, -2.0, -0.5], [-0.5, -1.5, -1.0]]


def make_inputs():
    # ratios r: row 0 [4, 1, e^-1]; row 1 [1, 4, pad]
    log_ratio = torch.tensor([[LN4, 0.0, -1.0], [0.0, LN4, 0.0]])
    lp = torch.tensor(LOGPROBS, requires_grad=True)
    return LossInputs(
        logprobs=lp,
        old_logprobs=torch.tensor(LOGPROBS) - log_ratio,
        mask=torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]]),
        advantages=torch.tensor([1.0, -2.0]),
        num_tokens=5.0,
        num_sequences=2.0,
    )


def test_default_caps_weight_at_three_with_no_lower_bound():
    # eps_high = 2 -> weight w = min(r, 3): row 0 [3, 1, e^-1]; row 1 [1, 3]
    # values -w A lp: row 0 (A=1):  -3(-1) = 3,  -1(-2) = 2,  -e^-1(-0.5) = 0.18394
    #                 row 1 (A=-2): -1(-2)(-0.5) = -1,  -3(-2)(-1.5) = -9
    # sum = 5.18394 - 10 = -4.81606; / 5 = -0.963212
    inputs = make_inputs()
    out = CISPOLoss()(inputs)
    assert out.loss.item() == pytest.approx((5 + 0.5 * E1 - 10) / 5)
    assert out.loss.item() == pytest.approx(-0.963212, abs=1e-6)
    # gradient flows through logprobs only: d/dlp = -w A / 5 (w detached). The capped
    # tokens (r = 4) still get gradient, unlike PPO where they would get none.
    # Were w not detached, d(-r A lp)/dlp = -A r (1 + lp) would appear instead.
    out.loss.backward()
    expected = torch.tensor([[-3.0, -1.0, -E1], [2.0, 6.0, 0.0]]) / 5
    assert torch.allclose(inputs.logprobs.grad, expected)
    # is_weight_mean = (3 + 1 + e^-1 + 1 + 3) / 5; clip_frac = 2 capped / 5
    assert out.metrics["is_weight_mean"] == pytest.approx((8 + E1) / 5)
    assert out.metrics["clip_frac"] == pytest.approx(2 / 5)


def test_optional_lower_bound():
    # eps_low = 0.2: row 0's e^-1 = 0.3679 is raised to 0.8 -> value 0.8 * 0.5 = 0.4
    # sum = 3 + 2 + 0.4 - 1 - 9 = -4.6; / 5 = -0.92
    out = CISPOLoss(eps_low=0.2)(make_inputs())
    assert out.loss.item() == pytest.approx(-0.92)
    assert out.metrics["clip_frac"] == pytest.approx(3 / 5)


def test_rejects_bad_eps():
    with pytest.raises(ValueError, match="eps_high"):
        CISPOLoss(eps_high=-1.0)
    with pytest.raises(ValueError, match="eps_low"):
        CISPOLoss(eps_low=1.5)
