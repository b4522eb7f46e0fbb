import pytest
from datasets import Dataset

from ludic_core.envs import DatasetQAEnv, gsm8k_target_parser, numeric_verifier

ROWS = [
    {"question": "What is 2+2?", "answer": "2+2=4\n#### 4"},
    {"question": "What is 10*100?", "answer": "10*100 = 1,000\n#### 1,000"},
    {"question": "Half of 5?", "answer": "5/2 = 2.5\n#### 2.5"},
]


def _gsm8k_env(data, **kwargs):
    return DatasetQAEnv(
        data, target_parser=gsm8k_target_parser, verifier=numeric_verifier, **kwargs
    )


@pytest.mark.parametrize("data", [ROWS, Dataset.from_list(ROWS)], ids=["list", "dataset"])
def test_correct_and_wrong_answers(data):
    env = _gsm8k_env(data, system_prompt="Answer in <answer></answer>.")
    assert env.suggested_sysprompt == "Answer in <answer></answer>."
    obs, info = env.reset(seed=1)["agent_0"]
    assert obs == "What is 10*100?" and info == {"sample_index": 1}
    out = env.step({"agent_0": "1000"})["agent_0"]
    assert out.reward == 1.0 and out.terminated
    assert out.info == {"target": "1000", "correct": True, "sample_index": 1}
    assert env.active_agents() == []

    env.reset(seed=4)  # 4 % 3 == 1
    out = env.env_step("999")
    assert out.reward == 0.0 and out.terminated and out.info["correct"] is False


def test_seed_picks_sample_and_index_overrides():
    env = DatasetQAEnv(ROWS)
    assert [env.env_reset(seed=s)[1]["sample_index"] for s in range(6)] == [0, 1, 2, 0, 1, 2]
    assert 0 <= env.env_reset()[1]["sample_index"] < 3
    fixed = DatasetQAEnv(ROWS, index=2)
    assert {fixed.env_reset(seed=s)[0] for s in range(5)} == {"Half of 5?"}
    with pytest.raises(IndexError, match="index 3"):
        DatasetQAEnv(ROWS, index=3)


def test_default_exact_match_and_identity_target():
    rows = [{"q": "Capital of France?", "a": " Paris "}]
    env = DatasetQAEnv(rows, question_key="q", answer_key="a")
    assert env.suggested_sysprompt is None
    env.env_reset(seed=0)
    assert env.env_step(" Paris\n").reward == 1.0
    env.env_reset(seed=0)
    assert env.env_step("paris").reward == 0.0  # exact match is case-sensitive


def test_custom_verifier_gets_action_and_target():
    seen = []

    def verifier(action, target):
        seen.append((action, target))
        return action.lower() == target.lower()

    env = DatasetQAEnv([{"question": "q", "answer": "Yes"}], verifier=verifier)
    env.env_reset(seed=0)
    assert env.env_step("yes").reward == 1.0
    assert seen == [("yes", "Yes")]


@pytest.mark.parametrize("data", [ROWS, Dataset.from_list(ROWS)], ids=["list", "dataset"])
def test_missing_key_names_key_and_columns(data):
    with pytest.raises(ValueError) as err:
        DatasetQAEnv(data, question_key="problem")
    msg = str(err.value)
    assert "'problem'" in msg and "answer" in msg and "question" in msg
    with pytest.raises(ValueError, match="'solution'"):
        DatasetQAEnv(data, answer_key="solution")


def test_key_missing_in_one_row_and_empty_data():
    rows = ROWS + [{"question": "no answer here"}]
    with pytest.raises(ValueError, match="'answer'"):
        DatasetQAEnv(rows)
    with pytest.raises(ValueError, match="empty"):
        DatasetQAEnv([])


def test_step_without_reset_raises():
    env = DatasetQAEnv(ROWS)
    with pytest.raises(RuntimeError, match="reset"):
        env.env_step("4")
    env.env_reset(seed=0)
    env.env_step("4")
    with pytest.raises(RuntimeError, match="reset"):
        env.env_step("4")


@pytest.mark.parametrize(
    "action,target",
    [
        ("42", "42"),
        ("42.0", "42"),
        ("42", "42.00"),
        ("42.", "42"),
        (" 42 ", "42"),
        ("1,000", "1000"),
        ("1000", "1,000"),
        ("1,234,567.5", "1234567.5"),
        ("-3", "-3"),
        ("$18", "18"),
        (".5", "0.5"),
        ("0.1", "0.10"),
    ],
)
def test_numeric_verifier_accepts(action, target):
    assert numeric_verifier(action, target)


@pytest.mark.parametrize(
    "action,target",
    [
        ("41", "42"),
        ("-42", "42"),
        ("", "42"),
        ("forty-two", "42"),
        ("The answer is 42", "42"),
        ("42 apples", "42"),
        ("4 2", "42"),
        ("1,00", "100"),
        ("nan", "nan"),
        ("inf", "inf"),
        ("42", "not a number"),
        ("1e3", "1000"),
    ],
)
def test_numeric_verifier_rejects(action, target):
    assert not numeric_verifier(action, target)


def test_gsm8k_target_parser():
    assert gsm8k_target_parser("work\n#### 72") == "72"
    assert gsm8k_target_parser("a #### b\n####  1,234 ") == "1234"
    with pytest.raises(ValueError, match="####"):
        gsm8k_target_parser("no marker")


def test_malformed_gold_answer_fails_at_reset():
    env = _gsm8k_env([{"question": "q", "answer": "42"}])
    with pytest.raises(ValueError, match="####"):
        env.env_reset(seed=0)
