"""`decode_attention`: the compiled decode step's attention equals SDPA over expanded KV heads."""

import pytest
import torch

from ludic_core.inference.decode_attention import DECODE_ATTENTION, decode_attention, decode_attention_on


def _inputs(batch=3, heads=6, groups=2, columns=10, dim=8, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(batch, heads, 1, dim, generator=g).to(dtype)
    k = torch.randn(batch, groups, columns, dim, generator=g).to(dtype)
    v = torch.randn(batch, groups, columns, dim, generator=g).to(dtype)
    lengths = torch.tensor([0, 4, 9])[:batch]  # row b attends to columns 0..lengths[b]
    mask = (torch.arange(columns)[None, :] <= lengths[:, None])[:, None, None, :]
    return q, k, v, mask


def _reference(q, k, v, mask, scale):
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)  # transformers' repeat_kv order
    out = torch.nn.functional.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                           scale=scale)
    return out.transpose(1, 2)  # [B, 1, H, D]


@pytest.mark.parametrize("additive", [False, True])
def test_compiled_decode_attention_equals_sdpa_over_repeated_kv_heads(additive):
    q, k, v, mask = _inputs()
    scale = 0.3
    attn = torch.where(mask, 0.0, torch.finfo(torch.float32).min) if additive else mask
    traced = torch.compile(lambda *a: decode_attention(None, *a, scaling=scale)[0], backend="eager", fullgraph=True)
    got = traced(q, k, v, attn)
    assert got.shape == (3, 1, 6, 8)
    torch.testing.assert_close(got, _reference(q, k, v, mask, scale), rtol=1e-5, atol=1e-5)


def test_bf16_inputs_accumulate_in_fp32():
    """bf16 queries, keys and values: within bf16's output rounding of the fp32 result."""
    q, k, v, mask = _inputs(dtype=torch.bfloat16)
    traced = torch.compile(lambda *a: decode_attention(None, *a)[0], backend="eager", fullgraph=True)
    got = traced(q, k, v, mask)
    assert got.dtype == torch.bfloat16
    ref = _reference(q, k, v, mask, 8 ** -0.5)
    assert float((got.float() - ref).abs().max()) < 1e-2


def test_outside_a_compiled_step_it_is_transformers_sdpa():
    q, k, v, mask = _inputs()

    class Layer(torch.nn.Module):
        num_key_value_groups = 3
        is_causal = True

    got, _ = decode_attention(Layer(), q, k, v, mask, scaling=0.5)
    torch.testing.assert_close(got, _reference(q, k, v, mask, 0.5), rtol=1e-5, atol=1e-5)


def test_the_model_attends_through_it_only_inside_the_block(model_tok_cpu):
    model, _ = model_tok_cpu
    before = model.config._attn_implementation
    with decode_attention_on(model):
        assert model.config._attn_implementation == DECODE_ATTENTION
    assert model.config._attn_implementation == before


@pytest.fixture(scope="module")
def model_tok_cpu(tiny_model_and_tokenizer):
    return tiny_model_and_tokenizer
