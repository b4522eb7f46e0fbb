"""token_logprobs against an explicit python loop."""

import math

import pytest
import torch

from ludic_core.losses import token_logprobs


def test_matches_manual_loop():
    torch.manual_seed(0)
    logits = torch.randn(2, 4, 5)
    ids = torch.tensor([[1, 4, 0, 2], [3, 3, 1, 0]])
    out = token_logprobs(logits, ids)
    assert out.shape == (2, 3) and out.dtype == torch.float32
    for b in range(2):
        for t in range(3):
            row = logits[b, t].tolist()
            log_z = math.log(sum(math.exp(x) for x in row))
            # position t scores the NEXT token, ids[b, t + 1]
            assert out[b, t].item() == pytest.approx(row[ids[b, t + 1]] - log_z, abs=1e-5)


def test_by_hand_and_fp32_from_bf16():
    # logits [0, ln 3] -> p = [1/4, 3/4]; next token 1 -> ln 0.75 = -0.287682
    logits = torch.tensor([[[0.0, math.log(3.0)], [9.0, 9.0]]])
    assert token_logprobs(logits, torch.tensor([[0, 1]])).item() == pytest.approx(math.log(0.75))
    out = token_logprobs(logits.bfloat16(), torch.tensor([[0, 0]]))
    assert out.dtype == torch.float32


def test_gradient_and_shape_check():
    logits = torch.zeros(1, 3, 2, requires_grad=True)
    token_logprobs(logits, torch.tensor([[0, 1, 0]])).sum().backward()
    # d log softmax(z)_k / d z = onehot(k) - p, p = [0.5, 0.5]; last position unused
    assert logits.grad.tolist() == [[[-0.5, 0.5], [0.5, -0.5], [0.0, 0.0]]]
    with pytest.raises(ValueError, match="do not match"):
        token_logprobs(torch.zeros(1, 3, 2), torch.zeros(1, 4, dtype=torch.long))
