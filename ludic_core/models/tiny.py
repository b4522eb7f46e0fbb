"""Build a tiny causal LM + tokenizer offline, as a normal HF directory.

Our machines have no model hub, yet every path (local inference, vLLM, training,
publishing) must run for real. So we build a small Llama-style model with random
weights and a byte-level tokenizer (256 byte tokens, no merges, ChatML special
tokens, a chat template) and save both with `save_pretrained`. Anything that
accepts such a directory also accepts a real HF model directory or hub id.

Why byte level: every string round-trips exactly (no unknown tokens), and ids
are stable and obvious (`id = byte + N_SPECIAL`). Why untied embeddings: vLLM's
weight reload keeps a stale packed lm_head for tied models.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from ludic_core.models.loading import MODEL_INIT_LOCK

__all__ = ["TinyPreset", "PRESETS", "build_tiny_model", "build_byte_tokenizer", "CHAT_TEMPLATE"]

SPECIAL_TOKENS = ("<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>")
N_SPECIAL = len(SPECIAL_TOKENS)

# ChatML with OpenAI-style tools in the system turn, one line each (name, typed
# parameters, summary: every byte is a token of a 1024-position model, and the
# full JSON schema is ~300 of them per tool), and tool calls rendered in Hermes
# format, the same text ToolAgent parses back.
CHAT_TEMPLATE = (
    "{% set ns = namespace(skip_first=false) %}"
    "{% if tools %}<|im_start|>system\n"
    "{% if messages[0]['role'] == 'system' %}{{ messages[0]['content'] }}\n"
    "{% set ns.skip_first = true %}{% endif %}"
    "Tools:{% for t in tools %}{% set f = t.get('function', t) %}{{ '\\n' }}{{ f.get('name', '') }}("
    "{% for k, v in (f.get('parameters') or {}).get('properties', {}).items() %}{% if not loop.first %}, {% endif %}"
    "{{ k }}: {{ v.get('type', 'any') }}{% endfor %}) {{ f.get('description', '') }}{% endfor %}"
    "<|im_end|>\n{% endif %}"
    "{% for m in messages %}"
    "{% if not (loop.first and ns.skip_first) %}"
    "<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
    "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}<tool_call>"
    "{% set args = c['function']['arguments'] %}"
    "{\"name\": {{ c['function']['name'] | tojson }}, \"arguments\": "
    "{% if args is string %}{{ args }}{% else %}{{ args | tojson }}{% endif %}}"
    "</tool_call>{% endfor %}{% endif %}<|im_end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass(frozen=True)
class TinyPreset:
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    intermediate_size: int
    max_position_embeddings: int = 1024


#: Head sizes vLLM's CPU attention supports (vllm 0.32, `CPUAttentionBackend.get_supported_head_sizes`):
#: a preset outside them builds and trains, then kills a CPU vLLM server on its first request.
VLLM_CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)

PRESETS: dict[str, TinyPreset] = {
    # ~0.9M parameters: learns tic-tac-toe in minutes on 2 CPU cores.
    "tiny-1m": TinyPreset(128, 4, 4, 384),
    # ~10M parameters: closer to a real model's behaviour, ~8x slower. 10 heads of 32
    # (8 heads of 40 trained fine but could not be served by vLLM's CPU build).
    "tiny-10m": TinyPreset(320, 8, 10, 864),
}


def _byte_alphabet() -> list[str]:
    """The printable-unicode stand-in for each byte 0..255 (GPT-2 byte level)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def build_byte_tokenizer():
    """A `PreTrainedTokenizerFast` over bytes with ChatML special tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for i, ch in enumerate(_byte_alphabet()):
        vocab[ch] = N_SPECIAL + i
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    core.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in SPECIAL_TOKENS])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>", "<|endoftext|>"],
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


def build_tiny_model(
    out_dir: str | Path, preset: str = "tiny-1m", *, seed: int = 0, overwrite: bool = False
) -> Path:
    """Write a randomly initialised Llama-style model + tokenizer to `out_dir`.

    Deterministic given `seed`. Reuses an existing build with the same preset and
    seed unless `overwrite`; refuses to overwrite a different model silently.
    """
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    if preset not in PRESETS:
        raise ValueError(f"unknown tiny model preset {preset!r}; choose one of {sorted(PRESETS)}")
    out = Path(out_dir)
    stamp = {"preset": preset, "seed": seed}
    stamp_file = out / "ludic_tiny.json"
    if out.exists() and any(out.iterdir()) and not overwrite:
        if stamp_file.exists() and json.loads(stamp_file.read_text()) == stamp:
            return out
        raise FileExistsError(f"{out} is not empty and holds another model; pass overwrite=True")
    tok = build_byte_tokenizer()
    p = PRESETS[preset]
    config = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=p.hidden_size,
        intermediate_size=p.intermediate_size,
        num_hidden_layers=p.num_hidden_layers,
        num_attention_heads=p.num_attention_heads,
        num_key_value_heads=p.num_attention_heads,
        max_position_embeddings=p.max_position_embeddings,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        # transformers 5 names it `dtype` and still takes this (the saved config.json keeps its form)
        torch_dtype="float32",  # type: ignore[call-arg]
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with MODEL_INIT_LOCK:  # not while another thread's from_pretrained has init patched out
            model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tok.save_pretrained(out)
    stamp_file.write_text(json.dumps(stamp))
    return out
