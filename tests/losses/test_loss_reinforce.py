"""REINFORCE (with and without baseline) against losses and gradients by hand."""

import pytest
import torch

from ludic_core.losses import LossInputs, ReinforceBaselineLoss, ReinforceLoss

# Row 0 has 2 action tokens, row 1 has 3: token and sequence reduction differ.
LOGPROBS = [[-1.0, -2.0, -0.5], [-0.2, -0.4, -3.0]]
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def make_inputs(advantages=(2.0, -1.0), baseline=0.0):
    lp = torch.tensor(LOGPROBS, requires_grad=True)
    return LossInputs(
        logprobs=lp,
        old_logprobs=torch.tensor(LOGPROBS),
        mask=torch.tensor(MASK),
        advantages=torch.tensor(advantages),
        num_tokens=5.0,
        num_sequences=2.0,
        batch_mean_advantage=baseline,
    )


def test_token_reduction():
    # values -A * lp:  row 0 (A=2):  2,  4, [1 masked]
    #                  row 1 (A=-1): -0.2, -0.4, -3.0
    # sum = 6 - 3.6 = 2.4; / num_tokens 5 = 0.48
    inputs = make_inputs()
    out = ReinforceLoss()(inputs)
    assert out.loss.item() == pytest.approx(0.48)
    # d/dlp = -A * mask / 5
    out.loss.backward()
    assert torch.allclose(inputs.logprobs.grad, torch.tensor([[-0.4, -0.4, 0.0], [0.2, 0.2, 0.2]]))
    # logp_mean = (-1 - 2 - 0.2 - 0.4 - 3) / 5 = -1.32; adv_mean = (2 - 1) / 2 = 0.5
    assert out.metrics == {"logp_mean": pytest.approx(-1.32), "adv_mean": pytest.approx(0.5)}
    # 0-d tensors, detached: the trainer reads them once per step, not per micro-batch
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 and not v.requires_grad for v in out.metrics.values())


def test_sequence_reduction_differs():
    # per-sequence means: row 0 (2 + 4) / 2 = 3; row 1 -3.6 / 3 = -1.2
    # (3 - 1.2) / num_sequences 2 = 0.9   (token reduction gave 0.48)
    inputs = make_inputs()
    out = ReinforceLoss(reduction="sequence")(inputs)
    assert out.loss.item() == pytest.approx(0.9)
    # d/dlp = -A / len_i / 2: row 0 -2 / 2 / 2 = -0.5; row 1 1 / 3 / 2 = 1/6
    out.loss.backward()
    expected = torch.tensor([[-0.5, -0.5, 0.0], [1 / 6, 1 / 6, 1 / 6]])
    assert torch.allclose(inputs.logprobs.grad, expected)


def test_baseline_subtracts_batch_mean_advantage():
    # b = 0.5: A - b = [1.5, -1.5]
    # values: row 0: 1.5, 3.0; row 1: -0.3, -0.6, -4.5 -> sum -0.9; / 5 = -0.18
    inputs = make_inputs(baseline=0.5)
    out = ReinforceBaselineLoss()(inputs)
    assert out.loss.item() == pytest.approx(-0.18)
    assert out.metrics["baseline"] == 0.5
    assert out.metrics["adv_mean"] == pytest.approx(0.5)
    out.loss.backward()
    # d/dlp = -(A - b) / 5 = [-0.3, +0.3]
    assert torch.allclose(inputs.logprobs.grad, torch.tensor([[-0.3, -0.3, 0.0], [0.3, 0.3, 0.3]]))


def test_baseline_cancels_uniform_advantages():
    # every sequence got A = 1 and the batch mean is 1: no signal, no gradient
    inputs = make_inputs(advantages=(1.0, 1.0), baseline=1.0)
    out = ReinforceBaselineLoss()(inputs)
    out.loss.backward()
    assert out.loss.item() == 0.0
    assert torch.count_nonzero(inputs.logprobs.grad) == 0


def test_misaligned_advantages_are_rejected():
    inputs = make_inputs()
    inputs.advantages = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="advantages must be"):
        ReinforceLoss()(inputs)
    inputs = make_inputs()
    inputs.mask = torch.ones(2, 4)
    with pytest.raises(ValueError, match="mask has shape"):
        ReinforceLoss()(inputs)
