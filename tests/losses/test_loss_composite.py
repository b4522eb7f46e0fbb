"""CompositeLoss: weighted sum of terms over one set of inputs."""

import pytest
import torch

from ludic_core.losses import (
    CompositeLoss,
    EntropyBonus,
    Loss,
    LossInputs,
    ReinforceLoss,
    TokenKLLoss,
)

LOGPROBS = [[-1.0, -2.0, -0.5], [-0.2, -0.4, -3.0]]


def make_inputs():
    return LossInputs(
        logprobs=torch.tensor(LOGPROBS, requires_grad=True),
        old_logprobs=torch.tensor(LOGPROBS),
        mask=torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]),
        advantages=torch.tensor([2.0, -1.0]),
        num_tokens=5.0,
        num_sequences=2.0,
        entropy=torch.tensor([[1.0, 2.0, 0.5], [0.3, 0.0, 4.0]]),
    )


def test_weighted_sum_and_namespaced_metrics():
    # pg:  REINFORCE, (2 + 4 - 0.2 - 0.4 - 3.0) / 5 = 0.48
    # ent: -0.01 * (1 + 2 + 0.3 + 0 + 4) / 5 = -0.0146
    # kl:  logprobs == old -> 0
    # total = 1.0 * 0.48 + 2.0 * -0.0146 + 0.5 * 0 = 0.4508
    loss = CompositeLoss([("pg", ReinforceLoss(), 1.0), ("ent", EntropyBonus(), 2.0), ("kl", TokenKLLoss(), 0.5)])
    assert isinstance(loss, Loss) and loss.needs_entropy is True
    inputs = make_inputs()
    out = loss(inputs)
    assert out.loss.item() == pytest.approx(0.4508)
    assert out.metrics == {
        "pg/loss": pytest.approx(0.48),
        "pg/logp_mean": pytest.approx(-1.32),
        "pg/adv_mean": pytest.approx(0.5),
        "ent/loss": pytest.approx(-0.0146),  # unweighted
        "ent/entropy": pytest.approx(1.46),
        "kl/loss": 0.0,
        "kl/kl": 0.0,
    }
    # gradient is the REINFORCE one (-A / 5) plus KL's, which is 0 on policy
    out.loss.backward()
    assert torch.allclose(inputs.logprobs.grad, torch.tensor([[-0.4, -0.4, 0.0], [0.2] * 3]))


def test_needs_entropy_only_if_a_term_does():
    assert CompositeLoss([("pg", ReinforceLoss(), 1.0)]).needs_entropy is False


def test_bad_terms():
    with pytest.raises(ValueError, match="at least one term"):
        CompositeLoss([])
    with pytest.raises(ValueError, match="duplicate term names \\['pg'\\]"):
        CompositeLoss([("pg", ReinforceLoss(), 1.0), ("pg", TokenKLLoss(), 1.0)])
