"""Sampling specs and the token sampler, checked against hand-computed numbers."""

import math

import pytest
import torch
from pydantic import ValidationError

from ludic_core.inference import ChatCompletionRequest, SamplingConfig
from ludic_core.inference.token_sampler import sample_tokens, sampling_logprobs

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
    g = torch.Generator().manual_seed(0)
    tok, lp = sample_tokens(LOGITS, torch.tensor([0.0]), torch.tensor([1.0]), [g])
    assert tok.tolist() == [2]
    assert lp.item() == pytest.approx(math.log(0.5), abs=1e-6)


def test_sampler_frequencies_follow_the_distribution():
    g = torch.Generator().manual_seed(123)
    counts = [0, 0, 0]
    for _ in range(6000):
        tok, _ = sample_tokens(LOGITS, torch.tensor([1.0]), torch.tensor([1.0]), [g])
        counts[int(tok)] += 1
    freqs = [c / 6000 for c in counts]
    assert freqs == pytest.approx([1 / 6, 2 / 6, 3 / 6], abs=0.025)
