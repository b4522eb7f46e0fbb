"""Sampling specs and the token sampler, checked against hand-computed numbers."""

import math

import pytest
import torch
from pydantic import ValidationError

from ludic_core.inference import ChatCompletionRequest, SamplingConfig
from ludic_core.inference.token_sampler import sample_tokens, sampling_logprobs, step_uniforms

# probs 1/6, 2/6, 3/6 at temperature 1
LOGITS = torch.log(torch.tensor([[1.0, 2.0, 3.0]]))


def test_negative_temperature_is_rejected_naming_the_field():
    with pytest.raises(ValidationError, match="temperature"):
        SamplingConfig(temperature=-0.1)


def test_unknown_sampling_field_is_rejected():
    with pytest.raises(ValidationError, match="temprature"):
        SamplingConfig(temprature=0.5)


def test_empty_messages_rejected():
    with pytest.raises(ValidationError, match="non-empty"):
        ChatCompletionRequest(messages=[])


def test_temperature_one_logprobs_are_the_softmax():
    lp = sampling_logprobs(LOGITS, torch.tensor([1.0]), torch.tensor([1.0]))[0]
    assert lp.tolist() == pytest.approx([math.log(1 / 6), math.log(2 / 6), math.log(3 / 6)], abs=1e-6)


def test_temperature_half_squares_the_probabilities():
    # logits / 0.5 = 2 log p  ->  p^2 / sum p^2 = [1, 4, 9] / 14
    lp = sampling_logprobs(LOGITS, torch.tensor([0.5]), torch.tensor([1.0]))[0]
    assert lp.exp().tolist() == pytest.approx([1 / 14, 4 / 14, 9 / 14], abs=1e-6)


def test_top_p_keeps_the_smallest_nucleus_and_renormalises():
    # sorted probs .5, .333, .167: with top_p = .5 the mass before token 1 (.5) already
    # reaches .5, so only token 2 survives; with top_p = .6 tokens 2 and 1 survive: [0, .4, .6].
    only = sampling_logprobs(LOGITS, torch.tensor([1.0]), torch.tensor([0.5]))[0]
    assert only.exp().tolist() == pytest.approx([0.0, 0.0, 1.0], abs=1e-6)
    two = sampling_logprobs(LOGITS, torch.tensor([1.0]), torch.tensor([0.6]))[0]
    assert two.exp().tolist() == pytest.approx([0.0, 0.4, 0.6], abs=1e-6)


def test_greedy_rows_take_argmax_and_report_unscaled_logprob():
    tok, lp = sample_tokens(LOGITS, torch.tensor([0.0]), None, torch.tensor([0.01], dtype=torch.float64))
    assert tok.tolist() == [2]
    assert lp.item() == pytest.approx(math.log(0.5), abs=1e-6)


def test_inverse_cdf_by_hand():
    # cdf of [1/6, 2/6, 3/6] is [.1667, .5, 1]: u picks the first token whose cdf exceeds it
    u = torch.tensor([0.0, 0.1, 0.1666, 0.1667, 0.4999, 0.5001, 0.9999], dtype=torch.float64)
    tok, lp = sample_tokens(LOGITS.expand(7, 3), torch.ones(7), None, u)
    assert tok.tolist() == [0, 0, 0, 1, 1, 2, 2]
    assert lp.tolist() == pytest.approx([math.log(p) for p in (1 / 6, 1 / 6, 1 / 6, 2 / 6, 2 / 6, .5, .5)], abs=1e-6)


def test_tokens_outside_the_nucleus_are_never_drawn():
    # top_p = .5 keeps token 2 only (see above): every uniform must land on it
    u = step_uniforms(torch.tensor([7]), 500)[0]
    tok, lp = sample_tokens(LOGITS.expand(500, 3), torch.ones(500), torch.full((500,), 0.5), u)
    assert set(tok.tolist()) == {2} and lp.abs().max().item() < 1e-6


def test_sampler_frequencies_follow_the_distribution():
    # one seed, 6000 decode steps: the column of uniforms a row would use step after step
    u = step_uniforms(torch.tensor([123]), 6000)[0]
    tok, _ = sample_tokens(LOGITS.expand(6000, 3), torch.ones(6000), None, u)
    freqs = [tok.tolist().count(k) / 6000 for k in range(3)]
    assert freqs == pytest.approx([1 / 6, 2 / 6, 3 / 6], abs=0.025)


def test_a_rare_token_is_drawn_at_its_rate():
    # p = 1e-3 among 1000 tokens: 100k draws give ~100 hits (a float32 cdf, or a
    # biased hash, would be visibly off); sd = sqrt(100) = 10
    logits = torch.full((1, 1000), 0.0)
    logits[0, 500] = math.log(1e-3 * 999 / (1 - 1e-3))
    u = step_uniforms(torch.arange(100), 1000).reshape(-1)
    tok, _ = sample_tokens(logits.expand(len(u), 1000), torch.ones(len(u)), None, u)
    assert 60 <= int((tok == 500).sum()) <= 140


def test_step_uniforms_are_uniform_reproducible_and_per_seed():
    seeds = torch.tensor([0, 1, 2, (1 << 63) - 1, 123456789])
    u = step_uniforms(seeds, 4000)
    assert u.dtype == torch.float64 and u.shape == (5, 4000)
    assert float(u.min()) >= 0.0 and float(u.max()) < 1.0
    flat = u.reshape(-1)
    assert float(flat.mean()) == pytest.approx(0.5, abs=0.01)
    assert float(flat.var()) == pytest.approx(1 / 12, abs=0.003)
    hist = torch.histc(flat.float(), bins=10, min=0.0, max=1.0) / flat.numel()
    assert hist.tolist() == pytest.approx([0.1] * 10, abs=0.01)
    # consecutive steps and neighbouring seeds are uncorrelated
    assert abs(float(torch.corrcoef(torch.stack([u[:, :-1].reshape(-1), u[:, 1:].reshape(-1)]))[0, 1])) < 0.03
    assert abs(float(torch.corrcoef(u[:2])[0, 1])) < 0.06
    # a row's uniforms depend on its own seed only (not on its batch-mates or their order)
    assert torch.equal(step_uniforms(seeds[[4, 1]], 4000), u[[4, 1]])
    assert torch.equal(step_uniforms(seeds, 10), u[:, :10])


def _one_scan(logits: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The definition: the first token whose fp64 cumulative probability exceeds u * total."""
    cdf = torch.log_softmax(logits.float(), -1).exp().cumsum(-1, dtype=torch.float64)
    return torch.searchsorted(cdf, (u * cdf[:, -1])[:, None], right=True).squeeze(-1)


@pytest.mark.parametrize("vocab", [3000, 151_936])
def test_a_wide_vocabulary_is_searched_in_two_levels_with_the_same_draws(vocab):
    """Block sums pick the block, one block is scanned: the draws equal one full scan's."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, vocab, generator=g) * 3
    u = step_uniforms(torch.arange(64), 1)[:, 0]
    tok, lp = sample_tokens(logits, torch.ones(64), None, u, greedy_rows=False)
    assert torch.equal(tok, _one_scan(logits, u))
    assert torch.allclose(lp, torch.log_softmax(logits, -1).gather(1, tok[:, None]).squeeze(1))


def test_two_level_draws_never_land_on_zero_probability_tokens():
    """Whole blocks of zeros (a top-p nucleus) and uniforms at both ends: every draw has p > 0,
    and the far end of the vocabulary (p = 1e-12, the last token) keeps its own interval."""
    vocab = 5000
    logits = torch.full((1, vocab), float("-inf"))
    logits[0, [3, 1023, 1024, 2047, 4097]] = 0.0  # a block's last and the next block's first entry
    logits[0, vocab - 1] = math.log(1e-12)
    u = torch.tensor([0.0, 0.2, 0.2 + 1e-12, 0.4, 0.6, 0.8, 0.999999, 1.0 - 2 ** -53], dtype=torch.float64)
    tok, _ = sample_tokens(logits.expand(len(u), vocab), torch.ones(len(u)), None, u, greedy_rows=False)
    assert tok.tolist() == _one_scan(logits.expand(len(u), vocab), u).tolist()
    assert set(tok.tolist()) <= {3, 1023, 1024, 2047, 4097, vocab - 1} and tok[-1] == vocab - 1


def test_without_greedy_rows_a_zero_temperature_row_samples_at_temperature_one():
    """greedy_rows=False is the caller's promise that no row is greedy: no argmax is taken."""
    u = torch.tensor([0.01], dtype=torch.float64)
    assert sample_tokens(LOGITS, torch.tensor([0.0]), None, u, greedy_rows=False)[0].tolist() == [0]
    assert sample_tokens(LOGITS, torch.tensor([0.0]), None, u)[0].tolist() == [2]
