import json
import os

import pytest
from datasets import Dataset, DatasetDict

from ludic_core.envs import DatasetQAEnv
from ludic_core.envs.dataset_file import dataset_qa_env, load_rows

ROWS = [
    {"question": "Capital of France?", "answer": "Paris"},
    {"question": "Capital of Peru?", "answer": "Lima"},
    {"question": "Capital of Chad?", "answer": "N'Djamena"},
]
GSM8K_ROWS = [
    {"q": "What is 10*100?", "a": "10*100 = 1,000\n#### 1,000"},
    {"q": "Half of 5?", "a": "5/2 = 2.5\n#### 2.5"},
]


def _write_jsonl(path, rows, blank_lines=False):
    lines = [json.dumps(r) for r in rows]
    sep = "\n\n" if blank_lines else "\n"
    path.write_text(sep.join(lines) + "\n", encoding="utf-8")
    return path


def _reward(env, seed, answer):
    obs, info = env.reset(seed=seed)["agent_0"]
    out = env.step({"agent_0": answer})["agent_0"]
    assert out.terminated
    return obs, info["sample_index"], out.reward


def _check_walk(env):
    """Consecutive seeds walk the rows and wrap; right answers score 1, wrong 0."""
    for seed in range(5):
        row = ROWS[seed % 3]
        assert _reward(env, seed, row["answer"]) == (row["question"], seed % 3, 1.0)
        assert _reward(env, seed, "Berlin")[2] == 0.0


def test_jsonl_round_trip(tmp_path):
    path = _write_jsonl(tmp_path / "capitals.jsonl", ROWS, blank_lines=True)
    env = dataset_qa_env(str(path), system_prompt="Answer briefly.")
    assert isinstance(env, DatasetQAEnv)
    assert env.suggested_sysprompt == "Answer briefly."
    _check_walk(env)
    assert _reward(env, 0, "  Paris \n")[2] == 1.0  # exact match strips whitespace
    assert _reward(env, 0, "paris")[2] == 0.0


def test_save_to_disk_round_trip(tmp_path):
    Dataset.from_list(ROWS).save_to_disk(str(tmp_path / "capitals"))
    _check_walk(dataset_qa_env(str(tmp_path / "capitals")))


def test_numeric_verifier_and_gsm8k_target(tmp_path):
    path = _write_jsonl(tmp_path / "math.jsonl", GSM8K_ROWS)
    env = dataset_qa_env(str(path), question_key="q", answer_key="a", verifier="numeric", target="gsm8k")
    assert _reward(env, 0, "1000.0") == ("What is 10*100?", 0, 1.0)
    assert _reward(env, 1, "2.5")[2] == 1.0
    assert _reward(env, 1, "2")[2] == 0.0
    # Plain target + exact match compares the whole solution text: nothing matches.
    plain = dataset_qa_env(str(path), question_key="q", answer_key="a")
    assert _reward(plain, 0, "1000")[2] == 0.0
    assert _reward(plain, 0, GSM8K_ROWS[0]["a"])[2] == 1.0


def test_rows_are_cached_until_the_file_changes(tmp_path):
    path = _write_jsonl(tmp_path / "capitals.jsonl", ROWS)
    first = load_rows(str(path))
    assert load_rows(str(path)) is first
    assert load_rows(tmp_path / "." / "capitals.jsonl") is first  # keyed by the resolved path
    assert dataset_qa_env(str(path)).data is first  # an env per episode shares the rows

    _write_jsonl(path, ROWS[:2])
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    second = load_rows(str(path))
    assert second is not first and len(second) == 2
    assert load_rows(str(path)) is second


def test_saved_dataset_is_reloaded_when_resaved(tmp_path):
    folder = tmp_path / "capitals"
    Dataset.from_list(ROWS).save_to_disk(str(folder))
    first = load_rows(str(folder))
    assert load_rows(str(folder)) is first
    Dataset.from_list(ROWS[:1]).save_to_disk(str(folder))
    for p in folder.iterdir():  # mtimes can tie within the clock's resolution
        os.utime(p, ns=(p.stat().st_atime_ns, p.stat().st_mtime_ns + 10**9))
    second = load_rows(str(folder))
    assert second is not first and len(second) == 1


def test_missing_path_names_it(tmp_path):
    missing = tmp_path / "nope.jsonl"
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        dataset_qa_env(str(missing))


def test_bad_json_line_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"bad\.jsonl:3: not valid JSON"):
        dataset_qa_env(str(path))
    path.write_text(json.dumps(ROWS[0]) + "\n[1, 2]\n", encoding="utf-8")
    with pytest.raises(ValueError, match="jsonl:2: a row is a list, expected an object"):
        dataset_qa_env(str(path))


def test_other_bad_inputs(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n", encoding="utf-8")
    with pytest.raises(ValueError, match="empty.jsonl: the dataset has no rows"):
        dataset_qa_env(str(empty))
    path = _write_jsonl(tmp_path / "capitals.jsonl", ROWS)
    with pytest.raises(ValueError, match=r"capitals\.jsonl: dataset has no column 'prompt'"):
        dataset_qa_env(str(path), question_key="prompt")
    with pytest.raises(ValueError, match="unknown verifier 'fuzzy'"):
        dataset_qa_env(str(path), verifier="fuzzy")
    with pytest.raises(ValueError, match="unknown target 'math'"):
        dataset_qa_env(str(path), target="math")
    DatasetDict({"train": Dataset.from_list(ROWS)}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match=r"DatasetDict with splits \['train'\].*dd/train"):
        dataset_qa_env(str(tmp_path / "dd"))
    assert len(load_rows(tmp_path / "dd" / "train")) == 3
