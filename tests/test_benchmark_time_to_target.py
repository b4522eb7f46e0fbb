"""`benchmarks/time_to_target.py`: its evaluation is the exact expected reward (that the script runs:
tests/test_benchmark_smokes.py)."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "benchmarks" / "time_to_target.py"


def _module():
    sys.path.insert(0, str(SCRIPT.parent))
    spec = importlib.util.spec_from_file_location("time_to_target_benchmark", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_the_expected_score_is_the_probability_weighted_reward(tiny_model_and_tokenizer, temperature):
    """By hand: with a reward of 1 for "<move>5</move>" and 0 for the other well-formed replies, the
    score is p(5) + (1 - sum p) * -1, where p is the model's own teacher-forced probability at the
    temperature (logits / T; the benchmark scores at its sampling temperature, 0.7)."""
    import torch

    mod = _module()
    model, tok = tiny_model_and_tokenizer
    board = "Board:\n123\n456\n789\nYou are X. Your move."
    score = mod.expected_score(model, tok, {0: board}, lambda text, ids, seed: 1.0 if text == "<move>5</move>" else 0.0,
                               temperature=temperature)
    prompt = list(tok.apply_chat_template([{"role": "user", "content": board}], add_generation_prompt=True,
                                          tokenize=True, return_dict=True)["input_ids"])
    probs = {}
    with torch.no_grad():
        for k in range(1, 10):
            reply = list(tok.encode(f"<move>{k}</move>", add_special_tokens=False)) + [tok.eos_token_id]
            logits = model(torch.tensor([prompt + reply])).logits[0].float() / temperature
            logp = torch.log_softmax(logits, -1)
            probs[k] = float(sum(logp[len(prompt) - 1 + i, t] for i, t in enumerate(reply)).exp())
    assert score == pytest.approx(probs[5] - (1 - sum(probs.values())), rel=1e-4, abs=1e-9)
    assert mod.TEMPERATURE == 0.7 and mod.expected_score.__defaults__ == (0.7,)
    assert mod.parse_setting("3e-4:2x4", ludic=True) == (3e-4, (2, 4))
    assert mod.parse_setting("1e-4:2", ludic=False) == (1e-4, (2, 1))
