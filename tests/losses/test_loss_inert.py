"""Which losses are inert at zero advantage, checked against their arithmetic; and no
loss reads a device tensor on the host (its metrics stay 0-d tensors)."""

import pytest
import torch

from tests.host_syncs import SyncCounter
from ludic_core.losses import (
    CISPOLoss,
    ClippedSurrogateLoss,
    CompositeLoss,
    EntropyBonus,
    GSPOLoss,
    LossInputs,
    MaskedCrossEntropyLoss,
    ReinforceBaselineLoss,
    ReinforceLoss,
    TokenKLLoss,
    is_inert,
)

INERT = [
    ClippedSurrogateLoss(),
    ClippedSurrogateLoss(reduction="sequence"),
    ClippedSurrogateLoss(clip_high=0.28, sampler_correction="seq_tis"),
    ClippedSurrogateLoss(sampler_correction="token_mis", sampler_cap=1.2),
    ReinforceLoss(),
    ReinforceLoss(reduction="sequence"),
    GSPOLoss(clip_low=0.05, clip_high=0.05),
    CISPOLoss(eps_high=0.1, eps_low=0.1),
    CompositeLoss([("pg", ClippedSurrogateLoss(), 1.0), ("cispo", CISPOLoss(), 0.5)]),
]
NOT_INERT = [
    ReinforceBaselineLoss(),
    MaskedCrossEntropyLoss(),
    EntropyBonus(coef=0.1),
    TokenKLLoss(coef=0.1),
    TokenKLLoss(coef=0.1, to="reference"),
    CompositeLoss([("pg", ClippedSurrogateLoss(), 1.0), ("kl", TokenKLLoss(coef=0.1), 1.0)]),
    CompositeLoss([("pg", ClippedSurrogateLoss(), 1.0), ("entropy", EntropyBonus(), 1.0)]),
]

ZERO = [1, 3]  # rows with advantage exactly 0


def make_inputs(rows=None, seed=0):
    """5 rows of 6 positions, ragged masks, ratios far from 1; the step totals are those of
    all 5 rows (as the trainer passes them whether or not rows are skipped)."""
    g = torch.Generator().manual_seed(seed)
    lp = -torch.rand(5, 6, generator=g) * 3
    old = lp - (torch.rand(5, 6, generator=g) - 0.5)
    mask = (torch.arange(6)[None, :] < torch.tensor([[6], [3], [5], [2], [4]])).float()
    adv = torch.tensor([1.5, 0.0, -0.7, 0.0, 0.4])
    entropy = torch.rand(5, 6, generator=g) * 2
    ref = lp - (torch.rand(5, 6, generator=g) - 0.5)
    rows = list(range(5)) if rows is None else rows
    leaf = lp[rows].clone().requires_grad_(True)
    return LossInputs(
        logprobs=leaf, old_logprobs=old[rows], mask=mask[rows], advantages=adv[rows],
        num_tokens=float(mask.sum()), num_sequences=5.0,
        entropy=entropy[rows] - leaf.exp() * leaf,  # depends on the weights, as a real entropy does
        batch_mean_advantage=float(adv.mean()), ref_logprobs=ref[rows],
    )


@pytest.mark.parametrize("loss", INERT, ids=lambda l: type(l).__name__)
def test_inert_losses_give_zero_rows_nothing(loss):
    """Loss and gradient over all rows equal those over the non-zero rows alone (same step
    totals), and the zero rows' gradient is exactly 0: skipping them changes nothing."""
    assert is_inert(loss)
    full, kept = make_inputs(), make_inputs([0, 2, 4])
    out_full, out_kept = loss(full), loss(kept)
    out_full.loss.backward()
    out_kept.loss.backward()
    assert out_full.loss.item() == pytest.approx(out_kept.loss.item(), rel=1e-6, abs=1e-7)
    assert torch.equal(full.logprobs.grad[ZERO], torch.zeros(2, 6))
    assert torch.allclose(full.logprobs.grad[[0, 2, 4]], kept.logprobs.grad, rtol=1e-6, atol=1e-8)
    assert kept.logprobs.grad.abs().sum() > 0  # the kept rows do train


@pytest.mark.parametrize("loss", NOT_INERT, ids=lambda l: type(l).__name__)
def test_losses_not_declared_inert_do_train_on_zero_rows(loss):
    """The honest 'no': each of these gives a zero-advantage row a gradient."""
    assert not is_inert(loss)
    full = make_inputs()
    loss(full).loss.backward()
    assert full.logprobs.grad[ZERO].abs().sum() > 1e-4


def test_a_loss_that_does_not_declare_is_not_inert():
    class Mine:
        needs_entropy = False
        needs_actor_logprobs = False

        def __call__(self, inputs): raise AssertionError("never called")

    class Truthy(Mine):
        inert_at_zero_advantage = 1  # not a bool: not a promise

    assert not is_inert(Mine()) and not is_inert(Truthy())
    assert not is_inert(CompositeLoss([("pg", ReinforceLoss(), 1.0), ("mine", Mine(), 1.0)]))


@pytest.mark.parametrize("loss", INERT + NOT_INERT, ids=lambda l: type(l).__name__)
def test_no_loss_reads_a_device_tensor_on_the_host(loss):
    inputs = make_inputs()
    with SyncCounter([inputs.logprobs, inputs.old_logprobs, inputs.mask, inputs.advantages, inputs.entropy,
                      inputs.ref_logprobs]) as counter:
        out = loss(inputs)
    assert counter.count == 0, counter.where
    for name, value in out.metrics.items():
        if not isinstance(value, float):
            assert value.dim() == 0 and not value.requires_grad, name


@pytest.mark.parametrize("loss", [ClippedSurrogateLoss(), GSPOLoss(), CISPOLoss()], ids=lambda l: type(l).__name__)
def test_metrics_without_action_tokens_are_zero(loss):
    """The masked max / min / means read 0 on a micro-batch with no action token
    (formerly an `if` on the host), and finite values otherwise."""
    inputs = make_inputs()
    inputs.mask = torch.zeros_like(inputs.mask)
    assert all(float(v) == 0.0 for k, v in loss(inputs).metrics.items() if k != "sampler_k3")
