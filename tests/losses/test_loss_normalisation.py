"""Gradient accumulation: losses divide by the WHOLE step's counts, so summing
micro-batch losses gives exactly the full-batch loss and gradient."""

import math

import pytest
import torch

from ludic_core.losses import (
    CISPOLoss,
    ClippedSurrogateLoss,
    EntropyBonus,
    GSPOLoss,
    LossInputs,
    MaskedCrossEntropyLoss,
    ReinforceBaselineLoss,
    ReinforceLoss,
    TokenKLLoss,
)

LOGPROBS = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -0.4, -3.0], [-0.9, -0.1, -0.3]])
OLD = LOGPROBS - torch.tensor([[0.3, -0.1, 0.0], [0.05, -0.4, 0.2], [0.0, 0.1, -0.2]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 1.0, 1.0]])
ADV = torch.tensor([2.0, -1.0, 0.5])
ENTROPY = torch.tensor([[1.0, 2.0, 0.5], [0.3, 0.0, 4.0], [0.7, 0.2, 1.1]])


def make_inputs(rows, lp, ent=ENTROPY):
    return LossInputs(
        logprobs=lp[rows],
        old_logprobs=OLD[rows],
        mask=MASK[rows],
        advantages=ADV[rows],
        num_tokens=7.0,  # the step's totals, whatever the micro-batch holds
        num_sequences=3.0,
        entropy=ent[rows],
        batch_mean_advantage=0.5,
    )


LOSSES = [
    ReinforceLoss(),
    ReinforceLoss("sequence"),
    ReinforceBaselineLoss(),
    ClippedSurrogateLoss(),
    GSPOLoss(clip_low=0.1, clip_high=0.1),
    CISPOLoss(eps_high=0.1),
    TokenKLLoss(),
    EntropyBonus(),
    MaskedCrossEntropyLoss(),
]


@pytest.mark.parametrize("loss_fn", LOSSES, ids=lambda f: repr(f))
def test_micro_batches_sum_to_the_full_batch(loss_fn):
    full_lp, full_ent = LOGPROBS.clone().requires_grad_(True), ENTROPY.clone().requires_grad_(True)
    full = loss_fn(make_inputs([0, 1, 2], full_lp, full_ent)).loss
    full.backward()

    lp, ent = LOGPROBS.clone().requires_grad_(True), ENTROPY.clone().requires_grad_(True)
    parts = [loss_fn(make_inputs(rows, lp, ent)).loss for rows in ([0], [1, 2])]
    sum(parts).backward()
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), abs=1e-7)
    for split, whole in [(lp.grad, full_lp.grad), (ent.grad, full_ent.grad)]:
        assert (split is None) == (whole is None)
        assert whole is None or torch.allclose(split, whole, atol=1e-7)
    assert math.isfinite(full.item())


def test_micro_batch_uses_step_count_by_hand():
    # REINFORCE, token reduction, num_tokens = 7 for the whole step
    # row 0 alone: -2 * (-1 - 2) = 6 -> 6 / 7 (NOT 6 / 2, its own token count)
    # rows 1, 2:  -(-1) * (-0.2 - 0.4 - 3.0) = -3.6; -0.5 * (-0.1 - 0.3) = 0.2 -> -3.4 / 7
    # sum = 2.6 / 7 = 0.371429 = full-batch loss
    lp = LOGPROBS.clone()
    a = ReinforceLoss()(make_inputs([0], lp)).loss.item()
    b = ReinforceLoss()(make_inputs([1, 2], lp)).loss.item()
    assert a == pytest.approx(6 / 7)
    assert b == pytest.approx(-3.4 / 7)
    assert ReinforceLoss()(make_inputs([0, 1, 2], lp)).loss.item() == pytest.approx(2.6 / 7)


def test_micro_batch_without_action_tokens_gives_zero_and_finite_metrics():
    inputs = make_inputs([0], LOGPROBS.clone().requires_grad_(True))
    inputs.mask = torch.zeros_like(inputs.mask)
    for loss_fn in LOSSES:
        out = loss_fn(inputs)
        assert out.loss.item() == 0.0
        assert all(math.isfinite(v) for v in out.metrics.values())
