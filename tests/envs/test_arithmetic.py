import re

import pytest

from ludic_core.envs import ArithmeticEnv, DatasetQAEnv, generate_arithmetic_problems

_EQ = re.compile(r"^(\d+) ([-+*]) (\d+) = (-?\d+)$")
_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _check(problem: dict) -> tuple[list[tuple[int, str, int, int]], int]:
    """Re-derive the answer: every line is a correct equation, the numbers in
    the question are exactly the operands that do not come from an earlier
    step, and the '####' value is the last result."""
    assert set(problem) == {"question", "answer"}
    *lines, final = problem["answer"].split("\n")
    m = re.fullmatch(r"#### (\d+)", final)
    assert m, f"bad final line {final!r}"
    eqs = []
    for line in lines:
        e = _EQ.fullmatch(line)
        assert e, f"bad equation line {line!r}"
        a, op, b, c = int(e[1]), e[2], int(e[3]), int(e[4])
        assert _OPS[op](a, b) == c, line
        eqs.append((a, op, b, c))
    assert eqs and eqs[-1][3] == int(m[1])
    results = [c for *_, c in eqs]
    fresh = []
    for i, (a, _, b, _) in enumerate(eqs):
        operands = [a, b]
        if i > 0:
            assert results[i - 1] in operands, "each step must use the previous result"
            operands.remove(results[i - 1])
        fresh += operands
    assert sorted(int(x) for x in re.findall(r"\d+", problem["question"])) == sorted(fresh)
    return eqs, int(m[1])


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_answers_are_correct(difficulty):
    for p in generate_arithmetic_problems(300, seed=1, difficulty=difficulty):
        eqs, answer = _check(p)
        assert answer >= 0
        assert p["question"].endswith("?")
        ops = [op for _, op, _, _ in eqs]
        if difficulty == "easy":
            assert len(eqs) == 1 and ops[0] in "+-"
            assert all(0 <= x <= 20 for x in eqs[0][:3:2])
        elif difficulty == "medium":
            assert len(eqs) == 2 and set(ops) <= {"+", "-"}
        else:
            assert len(eqs) == 2 and ops[0] == "*"


def test_deterministic_and_varied():
    a = generate_arithmetic_problems(50, seed=3, difficulty="medium")
    assert a == generate_arithmetic_problems(50, seed=3, difficulty="medium")
    assert a != generate_arithmetic_problems(50, seed=4, difficulty="medium")
    easy = generate_arithmetic_problems(200, seed=0)
    names = {q["question"].split()[0] for q in easy}
    assert len(names) > 5  # several names (and "There" for container templates)
    assert len({q["question"] for q in easy}) > 150
    assert any("+" in q["answer"] for q in easy) and any("-" in q["answer"] for q in easy)


def test_example_text():
    p = generate_arithmetic_problems(1, seed=0)[0]
    assert len(p["question"]) < 120 and "####" not in p["question"]


def test_bad_arguments():
    with pytest.raises(ValueError, match="difficulty 'insane'"):
        generate_arithmetic_problems(3, difficulty="insane")
    with pytest.raises(ValueError, match="n must be"):
        generate_arithmetic_problems(-1)
    assert generate_arithmetic_problems(0) == []


def test_arithmetic_env_grades_numerically():
    env = ArithmeticEnv(n=20, seed=5, difficulty="hard")
    assert isinstance(env, DatasetQAEnv)
    assert "answer tags" in env.suggested_sysprompt
    assert not any(ch.isdigit() for ch in env.suggested_sysprompt)  # nothing to copy by induction
    problems = generate_arithmetic_problems(20, seed=5, difficulty="hard")
    obs, info = env.reset(seed=7)["agent_0"]
    assert obs == problems[7]["question"] and info["sample_index"] == 7
    answer = problems[7]["answer"].rsplit("#### ", 1)[1]
    out = env.step({"agent_0": f"{answer}.0"})["agent_0"]
    assert out.reward == 1.0 and out.info["target"] == answer and out.terminated
    env.reset(seed=7)
    assert env.env_step(str(int(answer) + 1)).reward == 0.0
