"""PPO/GRPO token-level clipped surrogate, by hand."""

import math

import pytest
import torch

from ludic_core.losses import ClippedSurrogateLoss, LossInputs

E = math.exp
# log-ratios (logprobs - old_logprobs); the last column is padding whose old
# log-prob is -inf: multiplying by the mask instead of selecting would give inf * 0 = NaN.
LOG_RATIO = [[0.1, 0.3, -0.3, math.inf], [-0.2, -0.3, 0.3, math.inf]]
LOGPROBS = [[-1.0, -0.5, -2.0, -1.0], [-0.7, -1.2, -0.1, -1.0]]


def make_inputs(log_ratio=LOG_RATIO, advantages=(1.0, -1.0)):
    lp = torch.tensor(LOGPROBS, requires_grad=True)
    return LossInputs(
        logprobs=lp,
        old_logprobs=torch.tensor(LOGPROBS) - torch.tensor(log_ratio),
        mask=torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 0.0]]),
        advantages=torch.tensor(advantages),
        num_tokens=6.0,
        num_sequences=2.0,
    )


def test_loss_gradient_and_metrics_by_hand():
    # clip range [0.8, 1.2]
    # row 0, A = +1: r = e^0.1 = 1.10517 inside        -> -min(r, r)       = -e^0.1
    #                r = e^0.3 = 1.34986 > 1.2          -> -min(r, 1.2)     = -1.2   (clipped)
    #                r = e^-0.3 = 0.74082 < 0.8         -> -min(r, 0.8)     = -e^-0.3 (pessimistic: unclipped)
    # row 1, A = -1: r = e^-0.2 = 0.81873 inside        -> -min(-r, -r)     = e^-0.2
    #                r = e^-0.3 = 0.74082 < 0.8         -> -min(-r, -0.8)   = 0.8    (clipped)
    #                r = e^0.3 = 1.34986 > 1.2          -> -min(-r, -1.2)   = e^0.3  (unclipped)
    # sum = -1.10517 - 1.2 - 0.74082 + 0.81873 + 0.8 + 1.34986 = -0.07740; / 6 = -0.012900
    inputs = make_inputs()
    out = ClippedSurrogateLoss()(inputs)
    expected = (-E(0.1) - 1.2 - E(-0.3) + E(-0.2) + 0.8 + E(0.3)) / 6
    assert expected == pytest.approx(-0.012900, abs=1e-6)
    assert out.loss.item() == pytest.approx(expected)
    # gradient: d(-A r)/dlp = -A r on unclipped tokens, 0 on clipped ones (and padding), / 6
    out.loss.backward()
    grad = torch.tensor([[-E(0.1), 0.0, -E(-0.3), 0.0], [E(-0.2), 0.0, E(0.3), 0.0]]) / 6
    assert torch.allclose(inputs.logprobs.grad, grad)
    m = out.metrics
    assert m["clip_frac"] == pytest.approx(2 / 6)
    assert m["ratio_mean"] == pytest.approx((E(0.1) + 2 * E(0.3) + 2 * E(-0.3) + E(-0.2)) / 6)
    assert m["ratio_max"] == pytest.approx(E(0.3))
    assert m["ratio_min"] == pytest.approx(E(-0.3))
    # approx_kl = mean(old - new) = -(0.1 + 0.3 - 0.3 - 0.2 - 0.3 + 0.3) / 6 = 0.1 / 6
    assert m["approx_kl"] == pytest.approx(0.1 / 6)


def test_asymmetric_clip_higher():
    # clip range [0.8, 1.4]: row 0's r = e^0.3 = 1.34986 is no longer clipped -> -e^0.3;
    # row 1's r = e^0.3 with A < 0 was unclipped anyway; only row 1's e^-0.3 stays clipped.
    # sum = -e^0.1 - e^0.3 - e^-0.3 + e^-0.2 + 0.8 + e^0.3 = -e^0.1 - e^-0.3 + e^-0.2 + 0.8
    out = ClippedSurrogateLoss(clip_low=0.2, clip_high=0.4)(make_inputs())
    assert out.loss.item() == pytest.approx((-E(0.1) - E(-0.3) + E(-0.2) + 0.8) / 6)
    assert out.metrics["clip_frac"] == pytest.approx(1 / 6)


def test_on_policy_gradient_is_reinforce():
    # logprobs == old: r = 1 everywhere, value = -A, gradient -A / num_tokens per token
    inputs = make_inputs(log_ratio=[[0.0] * 4, [0.0] * 4], advantages=(2.0, -1.0))
    out = ClippedSurrogateLoss()(inputs)
    # loss = (3 * -2 + 3 * 1) / 6 = -0.5
    assert out.loss.item() == pytest.approx(-0.5)
    out.loss.backward()
    assert torch.allclose(
        inputs.logprobs.grad, torch.tensor([[-2 / 6] * 3 + [0.0], [1 / 6] * 3 + [0.0]])
    )
    assert out.metrics["clip_frac"] == 0.0 and out.metrics["approx_kl"] == 0.0


def test_rejects_bad_clip():
    with pytest.raises(ValueError, match="clip_low"):
        ClippedSurrogateLoss(clip_low=1.0)
    with pytest.raises(ValueError, match="clip_high"):
        ClippedSurrogateLoss(clip_high=-0.1)


LN2 = math.log(2.0)


def _mismatched():
    """Trainer log-probs [-1, -2]; the sampler reported [-1 - ln2, -2 + ln2]: w = trainer/sampler = [2, 0.5]."""
    lp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    return LossInputs(logprobs=lp, old_logprobs=torch.tensor([[-1.0 - LN2, -2.0 + LN2]]),
                      mask=torch.tensor([[1.0, 1.0]]), advantages=torch.tensor([1.0]), num_tokens=2.0,
                      num_sequences=1.0)


@pytest.mark.parametrize("correction, cap, loss, grad, capped", [
    # ratio against the trainer's own log-probs: value 1, so each token's value is -w * A
    ("token_tis", 1.5, -(1.5 + 0.5) / 2, [-0.75, -0.25], 0.5),  # w = [min(2, 1.5), 0.5]
    ("token_mis", 1.5, -(0.0 + 0.5) / 2, [0.0, -0.25], 0.5),    # the token above the cap is masked out
    ("seq_tis", 1.5, -(1.0 + 1.0) / 2, [-0.5, -0.5], 0.0),      # w_seq = exp(ln2 - ln2) = 1 for both tokens
    ("seq_mis", 0.9, 0.0, [0.0, 0.0], 1.0),                     # w_seq = 1 > 0.9: the whole sequence is masked
])
def test_sampler_correction_by_hand(correction, cap, loss, grad, capped):
    inputs = _mismatched()
    out = ClippedSurrogateLoss(sampler_correction=correction, sampler_cap=cap)(inputs)
    assert out.loss.item() == pytest.approx(loss)
    out.loss.backward()
    assert inputs.logprobs.grad.tolist()[0] == pytest.approx(grad)
    assert out.metrics["is_capped_frac"] == pytest.approx(capped)
    assert out.metrics["ratio_max"] == pytest.approx(1.0) and out.metrics["clip_frac"] == 0.0
    # the mismatch, k3 of d = sampler - trainer = [-ln2, ln2]: (0.5 + ln2 - 1 + 2 - ln2 - 1) / 2 = 0.25
    assert out.metrics["sampler_k3"] == pytest.approx(0.25)


def test_without_correction_the_sampler_mismatch_is_in_the_ratio():
    # r = [2, 0.5] against the sampler; A = 1, clip [0.8, 1.2]: -(min(2, 1.2) + min(0.5, 0.8)) / 2 = -0.85
    out = ClippedSurrogateLoss()(_mismatched())
    assert out.loss.item() == pytest.approx(-0.85)
    assert out.metrics["sampler_k3"] == pytest.approx(0.25) and "is_weight_mean" not in out.metrics


def test_sampler_correction_is_named_in_the_grpo_config():
    from ludic_core.algorithms import build_algorithm
    from ludic_core.config import GRPOConfig

    pg = build_algorithm(GRPOConfig(sampler_correction="seq_mis", sampler_cap=3.0)).loss
    assert (pg.sampler_correction, pg.sampler_cap) == ("seq_mis", 3.0)
    with pytest.raises(ValueError, match="sampler_correction must be"):
        ClippedSurrogateLoss(sampler_correction="tis")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="sampler_cap"):
        GRPOConfig(sampler_cap=0.0)


def test_sequence_reduction_weighs_each_reply_equally():
    # Zero log-ratios (r = 1, nothing clipped): per-token value = -A.
    # Row 0 has 3 tokens with A = +1, row 1 has 1 token with A = -1.
    # token:    (-1 * 3 + 1 * 1) / 4 tokens           = -0.5
    # sequence: (mean row 0 = -1) + (mean row 1 = +1) / 2 sequences = 0
    lp = torch.zeros(2, 3, requires_grad=True)
    inputs = LossInputs(logprobs=lp, old_logprobs=torch.zeros(2, 3),
                        mask=torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]]),
                        advantages=torch.tensor([1.0, -1.0]), num_tokens=4.0, num_sequences=2.0)
    assert ClippedSurrogateLoss()(inputs).loss.item() == pytest.approx(-0.5)
    assert ClippedSurrogateLoss(reduction="sequence")(inputs).loss.item() == pytest.approx(0.0)
