import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from ludic_core.models import PRESETS, build_tiny_model


def test_tiny_model_reloads_with_auto_classes(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    n_params = sum(p.numel() for p in model.parameters())
    assert 0.5e6 < n_params < 1.5e6
    text = "Board:\nX.O\n.X.\n..O\nYou are O. ünïcode"
    ids = tok.encode(text, add_special_tokens=False)
    assert tok.decode(ids) == text  # byte level: every string round-trips
    assert model.config.vocab_size == len(tok)
    assert not model.config.tie_word_embeddings


def test_chat_template_renders_chatml(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]
    text = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tok.eos_token == "<|im_end|>"


def test_build_is_deterministic_per_seed(tmp_path):
    a = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "a", seed=1))
    b = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "b", seed=1))
    c = AutoModelForCausalLM.from_pretrained(build_tiny_model(tmp_path / "c", seed=2))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not torch.equal(sa["lm_head.weight"], sc["lm_head.weight"])


def test_refuses_to_overwrite_a_different_model(tmp_path):
    build_tiny_model(tmp_path / "m", seed=1)
    assert build_tiny_model(tmp_path / "m", seed=1) == tmp_path / "m"  # same build reused
    with pytest.raises(FileExistsError, match="another model"):
        build_tiny_model(tmp_path / "m", seed=2)


def test_unknown_preset_is_named():
    with pytest.raises(ValueError, match="tiny-2m"):
        build_tiny_model("/nonexistent", "tiny-2m")
    assert set(PRESETS) == {"tiny-1m", "tiny-10m"}


def test_every_preset_has_a_head_size_vllms_cpu_build_serves():
    """tiny-10m once had 8 heads of 40: it trained, then killed vLLM's CPU server on its first request."""
    from ludic_core.models.tiny import VLLM_CPU_HEAD_SIZES

    for name, p in PRESETS.items():
        assert p.hidden_size % p.num_attention_heads == 0, name
        assert p.hidden_size // p.num_attention_heads in VLLM_CPU_HEAD_SIZES, name


@pytest.mark.vllm
def test_the_head_sizes_are_the_installed_vllms():
    import json
    import subprocess

    from ludic_core.models.tiny import VLLM_CPU_HEAD_SIZES
    from ludic_core.vllm.setup import env_python

    code = ("import json; from vllm.v1.attention.backends.cpu_attn import CPUAttentionBackend as B; "
            "print(json.dumps(list(B.get_supported_head_sizes())))")
    out = subprocess.run([str(env_python()), "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == list(VLLM_CPU_HEAD_SIZES)


def test_a_missing_model_directory_is_named(tmp_path):
    from ludic_core.models import load_model_and_tokenizer

    for missing in (tmp_path / "ckpt" / "model", "runs/nope/sft/checkpoints/step_00000800/model", "./model"):
        with pytest.raises(FileNotFoundError, match=f"model directory {missing} does not exist"):
            load_model_and_tokenizer(missing)


def test_the_chat_template_lists_each_tool_on_one_line():
    from ludic_core.agents.tools import function_schema
    from ludic_core.models.tiny import build_byte_tokenizer

    def add(a: int, b: float = 1.0) -> float:
        """Add two numbers.

        Args:
            a: the first
            b: the second
        """
        return a + b

    def ping() -> str:
        """Answer pong."""
        return "pong"

    tok = build_byte_tokenizer()
    text = tok.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
                                   tools=[function_schema(add), function_schema(ping)], tokenize=False,
                                   add_generation_prompt=True)
    assert text == ("<|im_start|>system\nBe brief.\nTools:\nadd(a: integer, b: number) Add two numbers.\n"
                    "ping() Answer pong.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
