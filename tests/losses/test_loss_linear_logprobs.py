"""linear_token_logprobs (hidden states -> log-probs, no logits kept) against the plain formula."""

import pytest
import torch

from ludic_core.losses import linear_token_logprobs, token_logprobs


def _reference(hidden, weight, bias, ids, temps):
    z = torch.nn.functional.linear(hidden, weight, bias).float()
    if temps is not None:
        z = z / temps[:, None, None]
    return torch.log_softmax(z[:, :-1], dim=-1).gather(-1, ids[:, 1:, None]).squeeze(-1)


@pytest.mark.parametrize("chunk", [1, 4, 4096])
@pytest.mark.parametrize("with_temps", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_values_and_all_gradients_match_in_fp32(chunk, with_temps, with_bias, device):
    torch.manual_seed(0)
    hidden = torch.randn(3, 6, 8, device=device)
    weight = torch.randn(40, 8, device=device)
    bias = torch.randn(40, device=device) if with_bias else None
    ids = torch.randint(0, 40, (3, 6), device=device)
    temps = torch.tensor([1.0, 0.7, 0.4], device=device) if with_temps else None
    upstream = torch.randn(3, 5, device=device)
    leaves = [t.clone().requires_grad_() for t in (hidden, weight) + ((bias,) if with_bias else ())]
    refs = [t.clone().requires_grad_() for t in (hidden, weight) + ((bias,) if with_bias else ())]
    got = linear_token_logprobs(leaves[0], leaves[1], leaves[2] if with_bias else None, ids, temperatures=temps,
                                chunk_tokens=chunk)
    want = _reference(refs[0], refs[1], refs[2] if with_bias else None, ids, temps)
    assert got.shape == (3, 5) and got.dtype == torch.float32
    assert torch.allclose(got, want, atol=1e-5)
    (got * upstream).sum().backward()
    (want * upstream).sum().backward()
    for a, b in zip(leaves, refs):
        assert torch.allclose(a.grad, b.grad, atol=1e-5), (a.shape, (a.grad - b.grad).abs().max())


def test_bf16_compute_matches_an_autocast_lm_head():
    torch.manual_seed(0)
    hidden = torch.randn(2, 33, 16)
    weight = (0.3 * torch.randn(300, 16)).requires_grad_()
    ids = torch.randint(0, 300, (2, 33))
    got = linear_token_logprobs(hidden, weight, None, ids, chunk_tokens=8, compute_dtype=torch.bfloat16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = torch.nn.functional.linear(hidden, weight)
    want = token_logprobs(logits, ids)
    assert torch.allclose(got, want, atol=2e-2)
    got.sum().backward()
    assert weight.grad.dtype == torch.float32 and torch.isfinite(weight.grad).all()


def test_a_frozen_output_layer_gets_no_gradient_and_shapes_are_checked():
    hidden = torch.randn(1, 4, 8, requires_grad=True)
    weight = torch.randn(10, 8)  # frozen, e.g. LoRA on attention only
    linear_token_logprobs(hidden, weight, None, torch.zeros(1, 4, dtype=torch.long)).sum().backward()
    assert hidden.grad is not None and weight.grad is None
    with pytest.raises(ValueError, match="does not match"):
        linear_token_logprobs(hidden, weight, None, torch.zeros(1, 5, dtype=torch.long))


def test_nothing_of_size_tokens_x_vocab_is_kept_for_backward():
    hidden = torch.randn(2, 64, 16, requires_grad=True)
    weight = torch.randn(1000, 16, requires_grad=True)
    ids = torch.randint(0, 1000, (2, 64))
    biggest = []

    def pack(t):
        biggest.append(t.numel())
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        linear_token_logprobs(hidden, weight, None, ids, chunk_tokens=16)
    assert max(biggest) == weight.numel()  # the weight itself; no [128, 1000] logits


@pytest.mark.parametrize("with_temps", [False, True])
def test_scoring_only_some_positions_gives_theirs_zero_elsewhere_and_their_gradients(with_temps, device):
    """positions = a trainer's action tokens: the values there and every gradient equal the
    full computation masked to them; the other positions read 0."""
    torch.manual_seed(1)
    hidden, weight = torch.randn(3, 6, 8, device=device), torch.randn(40, 8, device=device)
    ids = torch.randint(0, 40, (3, 6), device=device)
    temps = torch.tensor([[1.0] * 6, [0.7] * 6, [0.5] * 6], device=device) if with_temps else None  # per position
    keep = torch.zeros(3, 6, dtype=torch.bool)
    keep[0, 2:5] = keep[2, 0] = keep[2, 4] = True  # position t scores token t+1; t=5 has none
    positions = keep.flatten().nonzero().squeeze(1).to(device)
    upstream = torch.randn(3, 5, device=device)
    mine = [t.clone().requires_grad_() for t in (hidden, weight)]
    full = [t.clone().requires_grad_() for t in (hidden, weight)]
    got = linear_token_logprobs(*mine, None, ids, temperatures=temps, chunk_tokens=2, positions=positions)
    want = linear_token_logprobs(*full, None, ids, temperatures=temps, chunk_tokens=2)
    mask = keep[:, :-1].to(device)
    assert torch.equal(got[~mask], torch.zeros_like(got[~mask]))
    assert torch.allclose(got[mask], want[mask], atol=1e-6)
    (got * upstream).sum().backward()
    (want * upstream * mask).sum().backward()
    for a, b in zip(mine, full):
        assert torch.allclose(a.grad, b.grad, atol=1e-5)
    assert mine[0].grad[1].abs().max() == 0  # row 1 scores nothing: no gradient reaches its hidden states


@pytest.mark.heavy  # inductor compiles two functions per case on the CPU (~15 s)
@pytest.mark.parametrize("with_temps", [False, True])
def test_the_compiled_softmax_path_gives_the_eager_values_and_gradients(with_temps, monkeypatch):
    """What runs on a GPU in bf16 (`_FUSED`: compiled chunk functions reading bf16 logits),
    forced on the CPU: the same values and gradients as the eager path."""
    from ludic_core.losses import linear_logprobs as ll

    torch.manual_seed(2)
    hidden, weight = torch.randn(2, 9, 16), torch.randn(300, 16)
    ids = torch.randint(0, 300, (2, 9))
    temps = torch.tensor([0.7, 1.3]) if with_temps else None
    upstream = torch.randn(2, 8)
    runs = {}
    for fused in (False, True):
        monkeypatch.setattr(ll, "_fuses", lambda *a, fused=fused: fused)
        monkeypatch.setattr(ll, "_FUSED", ll._Fused())
        leaves = [t.clone().requires_grad_() for t in (hidden, weight)]
        got = linear_token_logprobs(*leaves, None, ids, temperatures=temps, chunk_tokens=5,
                                    compute_dtype=torch.bfloat16)
        (got * upstream).sum().backward()
        runs[fused] = (got, *(t.grad for t in leaves))
        if fused:
            assert not ll._FUSED.failed and set(ll._FUSED.fns) == {"logprobs", "grad"}
    for a, b in zip(runs[True], runs[False]):
        assert torch.allclose(a, b, atol=1e-4, rtol=1e-4), (a - b).abs().max()
