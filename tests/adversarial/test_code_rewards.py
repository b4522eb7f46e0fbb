"""The code env's reward pays for work only, and its feedback never hands the policy the answer.

- A policy that hard-codes whatever the feedback shows (the expected values of the asserts it
  was told failed) never reaches reward 1 with the default feedback; with `feedback: verbose`
  (documented as leaking) it does, which shows the attack is real.
- `reward: fraction` gives the null solution (`return None`) 0, on the problems the review
  named here and on all 164 under the `heavy` marker, while partial work still scores.
"""

from __future__ import annotations

import ast
import re

import pytest

from ludic_core.envs.code_exec import CodeExecEnv, load_humaneval

HARD_CODED = ("HumanEval/2", "HumanEval/0", "HumanEval/13")
NULL_NAMED = ("HumanEval/56", "HumanEval/61", "HumanEval/0", "HumanEval/2", "HumanEval/52", "HumanEval/64")


def _index(task_id: str) -> int:
    return int(task_id.split("/")[1])


def _pair(test: ast.expr) -> tuple[ast.expr, ast.expr] | None:
    """(call arguments, expected) of the assert shapes HumanEval uses."""
    def args(node: ast.expr) -> ast.expr | None:
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "candidate":
            return ast.Tuple(elts=node.args, ctx=ast.Load())
        return None
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and args(test.operand) is not None:
        return args(test.operand), ast.Constant(False)
    if args(test) is not None:
        return args(test), ast.Constant(True)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        if isinstance(test.ops[0], (ast.Eq, ast.Is)) and args(left) is not None:
            return args(left), right
        if (isinstance(left, ast.Call) and getattr(left.func, "id", "") == "abs" and isinstance(left.args[0], ast.BinOp)
                and args(left.args[0].left) is not None):
            return args(left.args[0].left), left.args[0].right
    return None


def _learn(feedback: str, table: dict[str, object]) -> None:
    """Everything the feedback shows of an assert, into the lookup table."""
    for source in re.findall(r"(assert .*?) -> ", feedback):
        try:
            pair = _pair(ast.parse(source).body[0].test)
            if pair is not None:
                table[repr(ast.literal_eval(pair[0]))] = ast.literal_eval(pair[1])
        except (SyntaxError, ValueError, IndexError, AttributeError):
            pass


def _hard_coder(entry: str, table: dict[str, object]) -> str:
    return f"_TABLE = {table!r}\n\ndef {entry}(*args):\n    return _TABLE.get(repr(args))\n"


def _play(task_id: str, feedback: str, attempts: int = 8) -> tuple[float, int]:
    """(final reward, table size) of the hard-coding policy over one episode."""
    env = CodeExecEnv("humaneval", reward="all", max_attempts=attempts, feedback=feedback, backend="bwrap", wall_s=5.0)
    env.reset(seed=_index(task_id))
    table: dict[str, object] = {}
    while True:
        outcome = env.env_step(_hard_coder(env.problem.entry_point, table))
        if outcome.terminated or outcome.truncated:
            return outcome.reward, len(table)
        _learn(outcome.obs, table)


@pytest.mark.parametrize("task_id", HARD_CODED)
def test_a_policy_that_copies_the_feedback_never_earns_the_reward(task_id):
    reward, learned = _play(task_id, "safe")
    assert reward == 0.0 and learned == 0


def test_verbose_feedback_leaks_and_says_so():
    """The opt-in verbose feedback shows the expected values: the same policy then earns 1.0."""
    reward, learned = _play("HumanEval/2", "verbose")
    assert reward == 1.0 and learned == 3
    with pytest.raises(ValueError, match="verbose"):
        CodeExecEnv("mini", feedback="loud")


def test_safe_feedback_names_the_test_and_how_it_failed():
    env = CodeExecEnv("humaneval", max_attempts=2, backend="bwrap", wall_s=5.0)
    env.reset(seed=2)
    wrong = env.env_step("def truncate_number(number):\n    return 0.25\n")
    raising = env.env_step("def truncate_number(number):\n    return number.nope\n")
    assert wrong.obs == "Test 1 of 3 failed: the result was wrong. Try again."
    assert raising.reward == 0.0 and raising.terminated  # the last attempt: no feedback, reward 0
    env.reset(seed=2)
    raising = env.env_step("def truncate_number(number):\n    return number.nope\n")
    assert raising.obs == "Test 1 of 3 failed: AttributeError was raised. Try again."
    assert "3.5" not in raising.obs and "0.5" not in wrong.obs


def _null_rewards(task_ids) -> dict[str, float]:
    env = CodeExecEnv("humaneval", reward="fraction", backend="bwrap", wall_s=5.0)
    rewards = {}
    for task_id in task_ids:
        env.reset(seed=_index(task_id))
        rewards[task_id] = env.env_step(f"def {env.problem.entry_point}(*args):\n    return None\n").reward
    return rewards


def test_the_null_solution_scores_zero_on_the_problems_it_used_to_score_on():
    rewards = _null_rewards(NULL_NAMED)
    assert rewards == dict.fromkeys(NULL_NAMED, 0.0)


def test_partial_work_still_scores():
    """HumanEval/56 (correct bracketing): a null solution passed 8 of 12 tests before; the canonical
    solution broken on one input passes 11 of 12, and only the 4 informative tests count."""
    env = CodeExecEnv("humaneval", reward="fraction", backend="bwrap", wall_s=5.0)
    env.reset(seed=56)
    canonical = env.problem.canonical_solution
    broken = (f"{env.problem.prompt}{canonical}\n_real = correct_bracketing\n"
              "def correct_bracketing(brackets):\n    return False if brackets == '<>' else _real(brackets)\n")
    outcome = env.env_step(broken)
    assert outcome.info["tests_passed"] == 11 and outcome.info["tests"] == 12
    assert 0.0 < outcome.reward < 1.0
    env.reset(seed=56)
    assert env.env_step(f"{env.problem.prompt}{canonical}").reward == 1.0


@pytest.mark.heavy
def test_the_null_solution_scores_zero_on_all_of_humaneval():
    ids = [p.task_id for p in load_humaneval()]
    rewards = _null_rewards(ids)
    print(f"null solution, reward fraction: {sum(r > 0 for r in rewards.values())} of {len(ids)} above 0")
    assert len(ids) == 164 and not [t for t, r in rewards.items() if r != 0.0]
