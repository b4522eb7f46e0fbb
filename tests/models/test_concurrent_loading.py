"""Models loaded from several threads at once (pipeline actors beside a trainer
stage) must leave transformers' init and tying intact for every later model:
`from_pretrained` patches them out process-wide while it loads."""

import threading

from transformers import LlamaConfig, LlamaForCausalLM
from transformers.modeling_utils import PreTrainedModel

from ludic_core.models import load_model_and_tokenizer


def test_concurrent_loads_leave_init_and_tying_intact(tiny_model_dir):
    init, tie = PreTrainedModel.init_weights, PreTrainedModel.tie_weights
    errors = []

    def load():
        try:
            for _ in range(3):
                load_model_and_tokenizer(tiny_model_dir)
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=load) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert PreTrainedModel.init_weights is init and PreTrainedModel.tie_weights is tie
    cfg = LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, tie_word_embeddings=True)
    model = LlamaForCausalLM(cfg)
    assert model.lm_head.weight is model.model.embed_tokens.weight
