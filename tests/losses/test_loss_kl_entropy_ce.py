"""KL penalty, entropy bonus and SFT cross-entropy, by hand."""

import math

import pytest
import torch

from ludic_core.losses import (
    EntropyBonus,
    LossInputs,
    MaskedCrossEntropyLoss,
    TokenKLLoss,
    token_entropy,
)

LN2 = math.log(2.0)
LOGPROBS = [[-1.0, -2.0, -0.5], [-0.2, -0.4, -3.0]]
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]


def make_inputs(d=None, entropy=None, mask=MASK, advantages=(2.0, -1.0)):
    """d = old_logprobs - logprobs."""
    lp = torch.tensor(LOGPROBS, requires_grad=True)
    old = torch.tensor(LOGPROBS) + (torch.tensor(d) if d is not None else 0.0)
    return LossInputs(
        logprobs=lp,
        old_logprobs=old,
        mask=torch.tensor(mask),
        advantages=torch.tensor(advantages),
        num_tokens=float(sum(map(sum, mask))),
        num_sequences=2.0,
        entropy=None if entropy is None else torch.tensor(entropy, requires_grad=True),
    )


def test_k3_kl_by_hand():
    # d = old - new; k3 = e^d - d - 1
    # d = 0    -> 0
    # d = ln2  -> 2 - ln2 - 1   = 0.306853
    # d = -ln2 -> 0.5 + ln2 - 1 = 0.193147
    # d = 1    -> e - 2         = 0.718282
    # mask row 1 = [1, 0, 0]: 4 tokens; sum = 0.5 + e - 2 = 1.218282; kl = 0.304570
    inputs = make_inputs(d=[[0.0, LN2, -LN2], [1.0, 9.0, 9.0]], mask=[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    out = TokenKLLoss(coef=0.1)(inputs)
    assert out.metrics["kl"] == pytest.approx((math.e - 1.5) / 4)
    assert out.metrics["kl"] == pytest.approx(0.304570, abs=1e-6)
    assert out.loss.item() == pytest.approx(0.1 * (math.e - 1.5) / 4)
    # d k3 / d lp = 1 - e^d, times coef / N = 0.025
    out.loss.backward()
    expected = torch.tensor([[0.0, -1.0, 0.5], [1 - math.e, 0.0, 0.0]]) * 0.025
    assert torch.allclose(inputs.logprobs.grad, expected)


def test_k3_kl_to_the_reference_by_hand():
    """to="reference": d = ref - new, the same k3 values; the behaviour log-probs play no part."""
    inputs = make_inputs(d=[[5.0] * 3, [-5.0] * 3], mask=[[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    inputs.ref_logprobs = torch.tensor(LOGPROBS) + torch.tensor([[0.0, LN2, -LN2], [1.0, 9.0, 9.0]])
    kl = TokenKLLoss(coef=0.1, to="reference")
    assert kl.needs_reference_logprobs and not kl.needs_actor_logprobs
    assert TokenKLLoss().needs_actor_logprobs and not TokenKLLoss().needs_reference_logprobs
    out = kl(inputs)
    assert out.metrics["kl"] == pytest.approx((math.e - 1.5) / 4)
    assert out.loss.item() == pytest.approx(0.1 * (math.e - 1.5) / 4)
    out.loss.backward()
    expected = torch.tensor([[0.0, -1.0, 0.5], [1 - math.e, 0.0, 0.0]]) * 0.025
    assert torch.allclose(inputs.logprobs.grad, expected)


def test_kl_to_the_reference_without_one_names_the_flag():
    with pytest.raises(ValueError, match="needs_reference_logprobs"):
        TokenKLLoss(to="reference")(make_inputs())
    with pytest.raises(ValueError, match="'reference' or 'behaviour'"):
        TokenKLLoss(to="ref")  # type: ignore[arg-type]


def test_kl_is_zero_on_policy():
    out = TokenKLLoss()(make_inputs(d=[[0.0] * 3, [0.0] * 3]))
    assert out.loss.item() == 0.0 and out.metrics["kl"] == 0.0


def test_entropy_bonus():
    # masked entropies: 1, 2, 0.3, 0, 4 -> sum 7.3, mean 7.3 / 5 = 1.46
    # loss = -0.01 * 1.46 = -0.0146; d loss / d H = -0.01 / 5 = -0.002 on action tokens
    inputs = make_inputs(entropy=[[1.0, 2.0, 0.5], [0.3, 0.0, 4.0]])
    bonus = EntropyBonus()
    assert bonus.needs_entropy is True
    out = bonus(inputs)
    assert out.loss.item() == pytest.approx(-0.0146)
    assert out.metrics == {"entropy": pytest.approx(1.46)}
    out.loss.backward()
    assert torch.allclose(inputs.entropy.grad, torch.tensor([[-0.002, -0.002, 0.0], [-0.002] * 3]))


def test_entropy_bonus_without_entropy_is_an_error():
    with pytest.raises(ValueError, match="needs inputs.entropy"):
        EntropyBonus()(make_inputs())


def test_token_entropy_by_hand():
    logits = torch.tensor(
        [
            [0.0, 0.0, 0.0, 0.0],  # uniform over 4: ln 4 = 1.386294
            [0.0, math.log(3.0), -math.inf, -math.inf],  # p = [1/4, 3/4, 0, 0]
            [5.0, -math.inf, -math.inf, -math.inf],  # one-hot: 0, not NaN
        ],
        requires_grad=True,
    )
    # row 1: -(1/4 ln 1/4 + 3/4 ln 3/4) = 0.346574 + 0.215762 = 0.562335
    h = token_entropy(logits)
    assert h.tolist() == pytest.approx([math.log(4), 0.562335, 0.0], abs=1e-6)
    h.sum().backward()
    assert torch.isfinite(logits.grad).all()
    # bf16 logits come back as fp32; leading dims are preserved
    assert token_entropy(torch.zeros(2, 3, 4, dtype=torch.bfloat16)).dtype == torch.float32
    assert token_entropy(torch.zeros(2, 3, 4)).shape == (2, 3)


def test_cross_entropy_ignores_advantages():
    # nll of action tokens: 1, 2, 0.2, 0.4, 3
    # token:    6.6 / 5 = 1.32
    # sequence: ((1 + 2) / 2 + (0.2 + 0.4 + 3) / 3) / 2 = (1.5 + 1.2) / 2 = 1.35
    for adv in [(2.0, -1.0), (0.0, 0.0)]:
        out = MaskedCrossEntropyLoss()(make_inputs(advantages=adv))
        assert out.loss.item() == pytest.approx(1.32)
        assert out.metrics == {"nll": pytest.approx(1.32)}
    assert MaskedCrossEntropyLoss("sequence")(make_inputs()).loss.item() == pytest.approx(1.35)
    inputs = make_inputs()
    MaskedCrossEntropyLoss()(inputs).loss.backward()
    # d/dlp = -1 / 5 on action tokens: REINFORCE with A = 1
    assert torch.allclose(inputs.logprobs.grad, torch.tensor([[-0.2, -0.2, 0.0], [-0.2] * 3]))
