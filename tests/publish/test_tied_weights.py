"""The publisher's handling of tied embeddings, without a server: save_pretrained
stores a tied head once, so the served schema has no `lm_head.weight` while
`state_dict()` does; the copy is dropped, a genuinely unknown tensor is not."""

from __future__ import annotations

import torch

from ludic_core.vllm.plugin import ludic_gloo_wire as wire
from ludic_core.vllm.publisher import _without_tied_copies


def _tied_llama(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    model.save_pretrained(tmp_path)
    return model


def test_a_tied_head_is_not_pushed_but_an_unknown_tensor_is_still_refused(tmp_path):
    model = _tied_llama(tmp_path)
    schema = wire.read_checkpoint_schema(tmp_path)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}  # copies, as full_state_dict makes
    assert "lm_head.weight" in state and "lm_head.weight" not in schema

    kept = _without_tied_copies(state, schema)
    metas = [wire.TensorMeta(n, "float32", tuple(t.shape)) for n, t in kept.items()]
    assert set(kept) == set(schema) and wire.schema_problems(metas, schema) == []

    diverged = {**state, "lm_head.weight": state["lm_head.weight"] + 1.0}  # same shape, other values
    kept = _without_tied_copies(diverged, schema)
    metas = [wire.TensorMeta(n, "float32", tuple(t.shape)) for n, t in kept.items()]
    assert wire.schema_problems(metas, schema) == ["unknown parameter 'lm_head.weight'"]
    assert torch.equal(kept["model.embed_tokens.weight"], state["model.embed_tokens.weight"])
