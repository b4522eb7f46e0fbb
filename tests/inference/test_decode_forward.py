"""`DecodeForward`: transformers' wrappers skipped, the same logits and cache writes, bit for bit."""

import pytest
import torch
from transformers import (GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, MistralConfig,
                          MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

from ludic_core.inference.batch_decoder import BatchDecoder
from ludic_core.inference.decode_forward import DecodeForward
from ludic_core.inference.sampling import SamplingConfig

SHAPE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)

ARCHITECTURES = {
    "llama, grouped KV heads": (LlamaForCausalLM, LlamaConfig, dict(num_key_value_heads=2)),
    "qwen2, q/k/v biases": (Qwen2ForCausalLM, Qwen2Config, dict(num_key_value_heads=2)),
    "qwen3, per-head q/k norms": (Qwen3ForCausalLM, Qwen3Config, dict(num_key_value_heads=2, head_dim=8)),
    "mistral": (MistralForCausalLM, MistralConfig, dict(num_key_value_heads=4, sliding_window=None)),
}


def _model(tok, name, dtype=torch.float32, **extra):
    cls, config_cls, kw = ARCHITECTURES[name]
    torch.manual_seed(0)
    config = config_cls(vocab_size=len(tok), eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                        **SHAPE, **kw, **extra)
    return cls(config).to(dtype).eval()


def _prompts(tok, n):
    return [tok.encode(f"row {i}: " + "xo" * (3 * i), add_special_tokens=False) for i in range(n)]


def _frame_mid_decode(model, tok, n=4):
    """A frame with `n` rows of different lengths, three steps into decoding."""
    dec = BatchDecoder(model, tok, compile=False)
    frame = dec._frame(n, 64)
    frame.admit([dec._row(p, SamplingConfig(temperature=1.0, max_tokens=16, seed=i), i)
                 for i, p in enumerate(_prompts(tok, n))])
    with torch.no_grad():
        for _ in range(3):
            frame.step()
    return frame


def _one_step_both_ways(frame):
    """(model(...) logits, DecodeForward logits, caches after each) for the frame's next token."""
    model, cache = frame.model, frame.cache
    upto = min(frame.horizon, frame.columns)
    cache.set_view(upto)
    visible = (frame.col_index[:upto][None, :] <= frame.lengths[:, None])[:, None, None, :]
    before = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
    with torch.no_grad():
        ref = model(input_ids=frame.tokens, attention_mask=visible, position_ids=frame.lengths[:, None],
                    use_cache=True, **{frame.cache_kwarg: cache}).logits[:, -1]
        ref_cache = [(layer.keys.clone(), layer.values.clone()) for layer in cache.layers]
        for layer, (k, v) in zip(cache.layers, before):
            layer.keys.copy_(k)
            layer.values.copy_(v)
        got = frame.forward(frame.tokens, frame.lengths[:, None], visible, cache)
    got_cache = [(layer.keys, layer.values) for layer in cache.layers]
    return ref, got, ref_cache, got_cache


@pytest.mark.parametrize("name", list(ARCHITECTURES))
def test_logits_and_cache_writes_equal_transformers_bit_for_bit(tiny_model_and_tokenizer, name):
    _, tok = tiny_model_and_tokenizer
    frame = _frame_mid_decode(_model(tok, name), tok)
    assert frame.forward is not None
    ref, got, ref_cache, got_cache = _one_step_both_ways(frame)
    assert torch.equal(ref, got)
    for (rk, rv), (gk, gv) in zip(ref_cache, got_cache):
        assert torch.equal(rk, gk) and torch.equal(rv, gv)


def test_bf16_matches_transformers_bit_for_bit(tiny_model_and_tokenizer):
    """RMSNorm in fp32, cast, then the bf16 weight: transformers' order of rounding."""
    _, tok = tiny_model_and_tokenizer
    frame = _frame_mid_decode(_model(tok, "llama, grouped KV heads", torch.bfloat16), tok)
    ref, got, _, _ = _one_step_both_ways(frame)
    assert got.dtype == torch.bfloat16 and torch.equal(ref, got)


def test_generations_are_identical_with_and_without_it(tiny_model_and_tokenizer, monkeypatch):
    """The shipped tiny model, sampled at T=0.7 with continuous batching: the same tokens and
    log-probs, to the bit, whether or not transformers' wrappers run."""
    model, tok = tiny_model_and_tokenizer
    model = model.float().eval()
    prompts = _prompts(tok, 6)
    samplings = [SamplingConfig(temperature=0.7, max_tokens=10 + i, seed=i) for i in range(6)]

    def run():
        dec = BatchDecoder(model, tok, compile=False)
        out = [(g.completion_token_ids, g.completion_logprobs) for g in dec.generate(prompts, samplings, max_batch=4)]
        return out, [f.forward is not None for f in dec._frames.values()]

    fast, used = run()
    assert all(used)
    monkeypatch.setattr(DecodeForward, "of", classmethod(lambda cls, m: None))
    plain, used = run()
    assert not any(used)
    assert fast == plain


def test_lora_layers_are_applied(tiny_model_and_tokenizer):
    """The projections are called as modules, so injected LoRA layers act (a non-zero adapter
    moves the logits, and both paths agree on where)."""
    from peft import LoraConfig, get_peft_model

    _, tok = tiny_model_and_tokenizer
    model = _model(tok, "llama, grouped KV heads")
    base = _one_step_both_ways(_frame_mid_decode(model, tok))[0]
    torch.manual_seed(1)
    get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "v_proj", "down_proj"], init_lora_weights=False))
    model.eval()
    frame = _frame_mid_decode(model, tok)
    assert frame.forward is not None
    ref, got, _, _ = _one_step_both_ways(frame)
    assert torch.equal(ref, got)
    assert not torch.allclose(ref, base)


def test_models_it_does_not_reproduce_decode_through_the_model(tiny_model_and_tokenizer):
    _, tok = tiny_model_and_tokenizer
    n = len(tok)
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=n, n_embd=32, n_layer=2, n_head=4)).eval()
    eager = LlamaForCausalLM(LlamaConfig(vocab_size=n, **SHAPE, attn_implementation="eager")).eval()
    windowed = _model(tok, "qwen2, q/k/v biases", use_sliding_window=True, sliding_window=8, max_window_layers=0)
    assert any(t == "sliding_attention" for t in windowed.config.layer_types)
    for model in (gpt2, eager, windowed):
        assert DecodeForward.of(model) is None, type(model).__name__
    assert DecodeForward.of(_model(tok, "qwen2, q/k/v biases")) is not None


def test_a_forward_hook_is_never_bypassed(tiny_model_and_tokenizer):
    """A hook on a layer it would skip: present at the start, no fast path; registered
    after the frame was built, the next admission turns it off, and the hook sees every step."""
    _, tok = tiny_model_and_tokenizer
    model = _model(tok, "llama, grouped KV heads")
    seen = []
    handle = model.model.layers[1].register_forward_hook(lambda *a: seen.append(1))
    assert DecodeForward.of(model) is None
    handle.remove()
    dec = BatchDecoder(model, tok, compile=False)
    frame = dec._frame(2, 64)
    assert frame.forward is not None
    handle = model.model.layers[1].register_forward_hook(lambda *a: seen.append(1))
    try:
        gens = dec.generate(_prompts(tok, 2), [SamplingConfig(temperature=1.0, max_tokens=5, seed=i)
                                               for i in range(2)])
    finally:
        handle.remove()
    assert frame.forward is None
    steps = max(len(g.completion_token_ids) for g in gens) - 1  # the first token comes from the prefill
    assert len(seen) == 1 + steps  # the prefill's forward and every step's


def test_rows_outgrowing_a_sliding_window_are_decoded_with_the_window(tiny_model_and_tokenizer):
    """The slot frame attends fully; a windowed model's rows that outgrow the window go to the
    dynamic-cache loop, whose masks apply it: their log-probs are what teacher forcing (which
    applies the window) scores. Rows inside the window keep the slot frame."""
    _, tok = tiny_model_and_tokenizer
    model = _model(tok, "qwen2, q/k/v biases", use_sliding_window=True, sliding_window=12, max_window_layers=0)
    dec = BatchDecoder(model, tok, compile=False)
    assert dec.window == 12
    prompts = [tok.encode("a long prompt, longer than the window", add_special_tokens=False)] * 2
    gens = dec.generate(prompts, [SamplingConfig(temperature=1.0, max_tokens=6, seed=i) for i in range(2)])
    assert not dec._frames  # no slot frame was used
    for p, g in zip(prompts, gens):
        ids = torch.tensor([p + g.completion_token_ids])
        with torch.no_grad():
            logp = torch.log_softmax(model(ids).logits[0].float(), -1)
        ref = [float(logp[len(p) - 1 + i, t]) for i, t in enumerate(g.completion_token_ids)]
        assert max(abs(a - b) for a, b in zip(ref, g.completion_logprobs)) < 1e-4
    short = tok.encode("ab", add_special_tokens=False)
    dec.generate([short], [SamplingConfig(temperature=1.0, max_tokens=4, seed=0)])
    assert dec._frames  # within the window: the slot frame
