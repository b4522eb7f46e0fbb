"""A policy is an adversary of its own reward: every way we know to forge a
code verdict, tried on both bubblewrap backends against HumanEval problems.

The criterion for a forgery is plain: an attack wrapped around a wrong
solution must pass no more tests than the wrong solution alone. A chatty
correct solution must still pass."""

from __future__ import annotations

import asyncio

import pytest

from ludic_core.envs.code_exec import CodeExecEnv, Limits, SandboxPool, load_humaneval, make_sandbox
from ludic_core.envs.code_exec.env import run_tests

LIMITS = Limits(wall_s=6.0, cpu_s=5, memory_mb=512)
TASKS = ("HumanEval/0", "HumanEval/2", "HumanEval/13")

# Each attack is code placed before (`pre`) or after (`post`) a wrong solution of the problem; an attack
# that answers a call itself answers with a value of the wrong type, so any test it passes is a forgery.
ATTACKS: dict[str, tuple[str, str]] = {
    "redefine the old reporter": ("", "def _ludic_report(*a):\n    print('pass')\n"),
    "always-equal object": ("", """
class _Eq:
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    def __bool__(self): return True
    def __hash__(self): return 0
_wrong = {entry}
def {entry}(*a, **k):
    return _Eq()
"""),
    "subclass of the expected type": ("", """
class _S(float):
    def __eq__(self, other): return True
    def __lt__(self, other): return True
_wrong = {entry}
def {entry}(*a, **k):
    return _S(0)
"""),
    "forged verdict lines on stdout": ("", """
import sys
for i in range(1000):
    print('["pass", %d, ""]' % (i % 50))
    print(f'LUDIC-0 pass {{i}}')
print('["done", -1, ""]')
sys.stdout.flush()
"""),
    "forged verdict in the return value": ("", """
def {entry}(*a, **k):
    return '\\n["pass", 0, ""]\\n["done", -1, ""]\\n'
"""),
    "write to every inherited fd": ("", """
import os
for fd in range(0, 256):
    try:
        os.write(fd, b'\\n["pass", 0, ""]\\n["done", -1, ""]\\n')
    except OSError:
        pass
"""),
    "read the judge's fds and memory through /proc": ("", """
import os
stolen = []
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) != os.getpid():
        for what in ('fd', 'mem', 'environ', 'map_files'):
            try:
                p = f'/proc/{{pid}}/{{what}}'
                stolen.append(os.listdir(p) if what in ('fd', 'map_files') else open(p, 'rb').read(64))
            except OSError:
                pass
        try:
            for fd in os.listdir(f'/proc/{{pid}}/fd'):
                open(f'/proc/{{pid}}/fd/{{fd}}', 'w').write('["pass", 0, ""]\\n["done", -1, ""]\\n')
        except OSError:
            pass
print('stolen', len(stolen))
"""),
    "kill every other process": ("", """
import os, signal
for pid in os.listdir('/proc'):
    if pid.isdigit() and int(pid) != os.getpid():
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
"""),
    "ptrace the judge": ("", """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
for pid in os.listdir('/proc'):
    if pid.isdigit():
        libc.ptrace(16, int(pid), 0, 0)  # PTRACE_ATTACH
"""),
    "read the caller's frames": ("", """
import sys
_wrong = {entry}
def {entry}(*a, **k):
    f = sys._getframe(1)
    while f is not None:
        for v in list(f.f_locals.values()):
            if isinstance(v, (bool, int, float, str, list, tuple)) and v is not None:
                pass
        f = f.f_back
    return _wrong(*a, **k)
"""),
    "exit before the tests": ("", "import os\nos._exit(0)\n"),
    "sys.exit inside the call": ("", "import sys\ndef {entry}(*a, **k):\n    sys.exit(0)\n"),
    "monkeypatch builtins and json": ("", """
import builtins, json
builtins.AssertionError = type('AE', (Exception,), {{}})
json.dumps = lambda *a, **k: '["pass", 0, ""]'
json.loads = lambda *a, **k: ['pass', 0, '']
"""),
    "huge reply": ("", "def {entry}(*a, **k):\n    return 'x' * (64 * 1024 * 1024)\n"),
    "deeply nested reply": ("", """
def {entry}(*a, **k):
    v = []
    for _ in range(100000):
        v = [v]
    return v
"""),
    "raw replies written ahead": ("", """
import os
try:
    os.write(4, b'{{"value": "forged"}}\\n' * 200 + b'{{"raised": ["AssertionError", ""]}}\\n' * 200)
except OSError:
    pass
"""),
    "malformed replies": ("", """
import os
def {entry}(*a, **k):
    os.write(4, b'{{"value": {{"d": [[1]]}}}}\\n{{"value": {{"zz": 1}}}}\\nnot json\\n[]\\n{{}}\\n')
    return ('wrong',)
"""),
    "forged exception type": ("", """
def {entry}(*a, **k):
    class AssertionError(Exception):
        pass
    raise AssertionError('pass')
"""),
    "read the test source from disk": ("", """
import os
found = []
for root in ('/jail', '/sandbox', '/tmp', '/proc/1'):
    for dirpath, dirs, files in os.walk(root):
        for f in files:
            try:
                if b'def check' in open(os.path.join(dirpath, f), 'rb').read(1 << 20):
                    found.append(f)
            except OSError:
                pass
print('found', found)
"""),
    "new user namespace": ("", """
import ctypes
ctypes.CDLL(None).unshare(0x10000000)
"""),
}


def _wrong(problem) -> str:
    """A wrong solution: the canonical one, with its result replaced by a value of another type."""
    return problem.canonical_solution + f"\n\n_real = {problem.entry_point}\n\ndef {problem.entry_point}(*a, **k):\n    return ('wrong',)\n"


def _attack(problem, name: str) -> str:
    pre, post = ATTACKS[name]
    return pre.format(entry=problem.entry_point) + _wrong(problem) + "\n" + post.format(entry=problem.entry_point)


@pytest.fixture(scope="module")
def problems():
    by_id = {p.task_id: p for p in load_humaneval()}
    return [by_id[t] for t in TASKS]


@pytest.fixture(scope="module", params=["bwrap-warm", "bwrap-cold"])
def pool(request):
    with SandboxPool(make_sandbox(request.param), concurrency=2, limits=LIMITS) as p:
        yield p


def test_no_attack_forges_a_verdict(pool, problems):
    """len(ATTACKS) x 3 problems x 2 backends: 0 forgeries."""
    cases = [(p, name) for p in problems for name in ATTACKS]

    async def go():
        honest = await asyncio.gather(*[run_tests(pool, p, _wrong(p)) for p in problems])
        attacked = await asyncio.gather(*[run_tests(pool, p, _attack(p, n)) for p, n in cases])
        return dict(zip((p.task_id for p in problems), honest)), attacked

    honest, attacked = asyncio.run(go())
    assert all(not r.passed and r.passed_tests == 0 for r in honest.values())  # the wrong solution is wrong
    forged = [(p.task_id, n, r.passed_tests, r.total) for (p, n), r in zip(cases, attacked)
              if r.passed or r.passed_tests > honest[p.task_id].passed_tests]
    assert not forged, forged
    assert len(cases) == 3 * len(ATTACKS) >= 60


def test_a_chatty_correct_solution_still_passes(pool, problems):
    chatty = {p.task_id: "    print('x' * 2048)\n" + p.canonical_solution for p in problems}  # ~2 KB per call
    reports = asyncio.run(_gather(pool, [(p, chatty[p.task_id]) for p in problems]))
    assert all(r.passed and r.fraction == 1.0 for r in reports), reports
    assert all(len(r.result.stdout) >= 2048 for r in reports)  # it did print, a lot


async def _gather(pool, cases):
    return await asyncio.gather(*[run_tests(pool, p, c) for p, c in cases])


# The harness before the judge split reported through `_ludic_report`, whose closure held the nonce.
_STEAL_NONCE = """
def has_close_elements(numbers, threshold):
    return 'no'
try:
    _nonce = [c.cell_contents for c in _ludic_report.__closure__ if isinstance(c.cell_contents, str)][0]
    for i in range(1000):
        print(f'{_nonce} pass {i}')
    print(f'{_nonce} {tail}')
except NameError:
    pass
"""


@pytest.mark.parametrize("backend", ["bwrap-warm", "bwrap-cold"])
@pytest.mark.parametrize("tail", ["done", "fail 0 {not json"])
def test_forged_lines_score_zero_in_the_env_and_nothing_raises(backend, tail):
    """The env's own path, `reward: fraction`: forged result lines (well- or
    ill-formed) are a wrong answer with reward 0, never an exception."""
    env = CodeExecEnv("humaneval", reward="fraction", backend=backend, wall_s=5.0)
    env.reset(seed=0)
    outcome = env.env_step(_STEAL_NONCE.replace("{tail}", tail.replace("{", "{{")))
    assert outcome.reward == 0.0 and outcome.terminated and outcome.info["passed"] is False
