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


def _reference(logits, ids, temps=None):
    """The plain formula the chunked function replaces: full fp32 log-softmax, gather."""
    z = logits.float()
    if temps is not None:
        z = z / temps[:, None, None]
    return torch.log_softmax(z[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("chunk", [1, 5, 4096])
@pytest.mark.parametrize("with_temps", [False, True])
def test_chunked_values_and_gradients_match_the_plain_formula(dtype, chunk, with_temps, device):
    torch.manual_seed(1)
    logits = (3 * torch.randn(3, 7, 50, device=device)).to(dtype)
    ids = torch.randint(0, 50, (3, 7), device=device)
    temps = torch.tensor([1.0, 0.7, 0.5], device=device) if with_temps else None
    weights = torch.randn(3, 6, device=device)  # an arbitrary upstream gradient
    a = logits.clone().requires_grad_()
    b = logits.clone().requires_grad_()
    got = token_logprobs(a, ids, temperatures=temps, chunk_tokens=chunk)
    want = _reference(b, ids, temps)
    assert got.dtype == torch.float32 and got.shape == (3, 6)
    assert torch.allclose(got, want, atol=1e-5)
    (got * weights).sum().backward()
    (want * weights).sum().backward()
    assert a.grad.dtype == dtype
    tol = 1e-6 if dtype == torch.float32 else 1e-2  # bf16 rounds the gradient itself
    assert torch.allclose(a.grad.float(), b.grad.float(), atol=tol)


def test_only_the_logits_are_kept_for_backward():
    """No fp32 [tokens, vocab] buffer survives the forward: what autograd saves is the
    (bf16) logits plus O(tokens); the plain formula keeps an fp32 log-softmax on top."""
    logits = torch.randn(2, 64, 1000, dtype=torch.bfloat16, requires_grad=True)
    ids = torch.randint(0, 1000, (2, 64))

    def saved_bytes(fn) -> int:
        seen: dict[int, int] = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(logits, ids)
        return sum(seen.values())

    logits_bytes = logits.numel() * 2
    lean = saved_bytes(lambda x, i: token_logprobs(x, i, chunk_tokens=16))
    plain = saved_bytes(_reference)
    assert lean <= logits_bytes + 2 * 64 * 16  # logits + per-position targets / normalisers
    assert plain > 1.9 * logits_bytes  # the fp32 log-softmax of 63 of 64 positions: 2x the bf16 logits
