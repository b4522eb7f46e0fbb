import re

import pytest

from ludic_core.envs import (
    ArithmeticEnv,
    DatasetQAEnv,
    generate_arithmetic_problems,
    gsm8k_target_parser,
)
from ludic_core.envs.arithmetic import arithmetic_oracle

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


# --- arithmetic_oracle: the scripted teacher that solves the question text ---

def _ask(policy, question: str) -> str:
    return policy([{"role": "system", "content": "Solve it."}, {"role": "user", "content": question}])


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_oracle_solves_every_generated_problem(difficulty):
    policy = arithmetic_oracle()
    for seed in (0, 1, 2):
        for p in generate_arithmetic_problems(300, seed=seed, difficulty=difficulty):
            expected = gsm8k_target_parser(p["answer"])
            assert _ask(policy, p["question"]) == f"<answer>{expected}</answer>", p


def test_oracle_reads_the_text_not_a_table():
    # Hand-written questions in the generator's phrasing, not from any generated set.
    policy = arithmetic_oracle()
    cases = {
        "Zoe has 1 coin and finds 7 more. How many coins does Zoe have now?": 8,  # 1 + 7
        "Tom has 9 cards. Tom gives 4 to Mia, then gets 10 from Mia. "
        "How many cards does Tom have now?": 15,  # 9 - 4 + 10
        "There is 1 shell in a jar. Ana adds 5, then removes 2. "
        "How many shells are in the jar now?": 4,  # 1 + 5 - 2
        "Sam buys 3 boxes with 7 books in each box. Then Sam sells 4. "
        "How many books does Sam have now?": 17,  # 3 * 7 - 4
        "Ivy has 2 apples and buys 4 bags of 5 apples each. "
        "How many apples does Ivy have now?": 22,  # 2 + 4 * 5
    }
    for question, answer in cases.items():
        assert _ask(policy, question) == f"<answer>{answer}</answer>", question


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_shown_work_is_the_generators_own_solution(difficulty):
    # The oracle reads the question; the generator wrote the solution while
    # building it: the two must agree line by line.
    policy = arithmetic_oracle(show_work=True)
    for p in generate_arithmetic_problems(300, seed=5, difficulty=difficulty):
        *lines, final = p["answer"].split("\n")
        expected = "".join(f"{line}\n" for line in lines) + f"<answer>{final.removeprefix('#### ')}</answer>"
        assert _ask(policy, p["question"]) == expected, p


def test_shown_work_by_hand():
    policy = arithmetic_oracle(show_work=True)
    assert _ask(policy, "Tom has 9 cards. Tom gives 4 to Mia, then gets 10 from Mia. "
                        "How many cards does Tom have now?") == "9 - 4 = 5\n5 + 10 = 15\n<answer>15</answer>"
    assert _ask(policy, "Ivy has 2 apples and buys 4 bags of 5 apples each. "
                        "How many apples does Ivy have now?") == "4 * 5 = 20\n2 + 20 = 22\n<answer>22</answer>"


@pytest.mark.parametrize(
    "question",
    [
        "What is 2 + 2?",
        "Tom has 5 apples and eats 2. How many apples does Tom have now?",
        "Tom has 5 apples. Tom buys 3 more",
        "",
    ],
)
def test_oracle_rejects_what_it_cannot_read(question):
    with pytest.raises(ValueError, match="cannot parse") as info:
        _ask(arithmetic_oracle(), question)
    assert repr(question) in str(info.value)


def test_oracle_needs_a_user_message():
    with pytest.raises(ValueError, match="no user message"):
        arithmetic_oracle()([{"role": "system", "content": "Solve it."}])


def test_oracle_earns_full_reward_through_the_agent_stack():
    import asyncio

    from ludic_core.agents import Agent
    from ludic_core.inference import ScriptedChatClient
    from ludic_core.interaction import SingleAgentSyncProtocol
    from ludic_core.parsers import xml_tag_parser

    client = ScriptedChatClient(arithmetic_oracle())

    async def collect():
        episodes = [
            SingleAgentSyncProtocol(Agent(client, parser=xml_tag_parser("answer"))).run(
                ArithmeticEnv(n=50, seed=3), max_steps=1, env_seed=s
            )
            for s in range(20)
        ]
        return [r for rs in await asyncio.gather(*episodes) for r in rs]

    rollouts = asyncio.run(collect())
    assert len(rollouts) == 20
    assert [r.total_reward for r in rollouts] == [1.0] * 20
