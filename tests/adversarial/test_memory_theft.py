"""The candidate reads everything its process can reach: its frames, `gc`, its whole
address space. So no byte of the judge's tests may ever have been in memory the
candidate inherited (DESIGN.md, "Untrusted code, untrusted data").

Two checks, on both bubblewrap backends:
- a canary planted in a problem's tests is searched for in the candidate's frames, in
  every object `gc` knows and in every readable byte of `/proc/self/mem`: 0 hits, while
  a control string the candidate did inherit (the jail's own docstring) is found, so
  the search is shown to work;
- the memory-theft attack (steal the judge's `assert candidate(...) == ...` lines from
  inherited memory, answer from a lookup table) forges nothing: it passes no test that
  the null solution (`return None`) does not pass. Three problems here; all 164 under
  the `heavy` marker.
"""

from __future__ import annotations

import asyncio
import json

import pytest

from ludic_core.envs.code_exec import CodeProblem, Limits, SandboxPool, load_humaneval, make_sandbox
from ludic_core.envs.code_exec.env import run_tests

LIMITS = Limits(wall_s=20.0, cpu_s=15, memory_mb=1024)
BACKENDS = ["bwrap-warm", "bwrap-cold"]

# Needles are split in two halves the candidate holds apart, so its own copies never hit:
# a hit is a place where the first half is followed by the second.
_SEARCH = r'''
import gc, json, sys

def _hit(text, a, b):
    if isinstance(text, bytes):
        a, b = a.encode(), b.encode()
    elif not isinstance(text, str):
        return 0
    n, i = 0, text.find(a)
    while i >= 0:
        n += text.startswith(b, i + len(a))
        i = text.find(a, i + 1)
    return n

def _walk(value, a, b, depth=0, seen=None):
    seen = set() if seen is None else seen
    if id(value) in seen or depth > 4:
        return 0
    seen.add(id(value))
    if isinstance(value, (str, bytes)):
        return _hit(value, a, b)
    if isinstance(value, dict):
        value = list(value.keys()) + list(value.values())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sum(_walk(v, a, b, depth + 1, seen) for v in list(value)[:10000])
    return 0

def in_frames(a, b):
    n, f = 0, sys._getframe()
    while f is not None:
        n += _walk(dict(f.f_locals), a, b) + _walk(f.f_globals, a, b) + _walk(f.f_code.co_consts, a, b)
        f = f.f_back
    return n

def in_gc(a, b):
    n = 0
    for o in gc.get_objects():
        if isinstance(o, (dict, list, tuple)):
            items = list(o.keys()) + list(o.values()) if isinstance(o, dict) else list(o)
            n += sum(_hit(v, a, b) for v in items if isinstance(v, (str, bytes)))
    return n

def _reader():
    """Reads this process's memory: /proc/self/mem (made readable again with PR_SET_DUMPABLE, which a
    setuid cleared), else straight through ctypes."""
    import ctypes
    ctypes.CDLL(None).prctl(4, 1, 0, 0, 0)
    try:
        mem = open("/proc/self/mem", "rb", buffering=0)
    except OSError:
        return lambda lo, n: bytes((ctypes.c_char * n).from_address(lo))
    def read(lo, n):
        mem.seek(lo)
        return mem.read(n)
    return read

def _regions():
    with open("/proc/self/maps") as maps:
        for r in (line.split() for line in maps):
            if "r" in r[1] and not (len(r) > 5 and r[5] in ("[vvar]", "[vsyscall]", "[vvar_vclock]")):
                yield tuple(int(x, 16) for x in r[0].split("-"))

def in_memory(a, b):
    """Every readable mapping of this process, read through /proc/self/mem."""
    a, b = a.encode(), b.encode()
    hits, scanned, read = 0, 0, _reader()
    for lo, hi in list(_regions()):
        pos, tail = lo, b""
        while pos < hi:
            try:
                chunk = read(pos, min(1 << 20, hi - pos))
            except (OSError, ValueError, OverflowError):
                break
            if not chunk:
                break
            scanned += len(chunk)
            data = tail + chunk
            i = data.find(a)
            while i >= 0:
                hits += data.startswith(b, i + len(a))
                i = data.find(a, i + 1)
            tail = data[-(len(a) + len(b)):]
            pos += len(chunk)
    return hits, scanned
'''

_CANARY_PROGRAM = _SEARCH + r'''
def _report():
    out = {}
    for name, (a, b) in {"canary": (NEEDLE_A, NEEDLE_B), "control": (CONTROL_A, CONTROL_B)}.items():
        mem_hits, scanned = in_memory(a, b)
        out[name] = {"frames": in_frames(a, b), "gc": in_gc(a, b), "memory": mem_hits, "scanned": scanned}
    print("SCAN " + json.dumps(out))

_report()

def f(x):
    return None
'''


def _canary_problem(canary_a: str, canary_b: str) -> CodeProblem:
    canary = canary_a + canary_b
    return CodeProblem(task_id="canary", prompt="def f(x):\n", entry_point="f",
                       test=f"def check(candidate):\n    assert candidate('{canary}') == '{canary}'\n")


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_canary_in_the_tests_is_nowhere_in_the_candidates_memory(backend):
    a, b = "LUDIC-CANARY-", "7f3a9c1e5b2d4086"
    program = (_CANARY_PROGRAM.replace("NEEDLE_A", repr(a)).replace("NEEDLE_B", repr(b))
               # the jail's docstring: memory the candidate did inherit, to show the search finds such bytes
               .replace("CONTROL_A", repr("The sandbox's first")).replace("CONTROL_B", repr(" process: runs each")))
    with SandboxPool(make_sandbox(backend), concurrency=1, limits=LIMITS) as pool:
        report = asyncio.run(run_tests(pool, _canary_problem(a, b), "    return None\n" + program))
    line = next((x for x in report.result.stdout.splitlines() if x.startswith("SCAN ")), None)
    assert line is not None, (report.result.status, report.result.stderr[-2000:])
    scan = json.loads(line[5:])
    assert scan["control"]["memory"] > 0 and scan["control"]["frames"] > 0, scan  # the search works
    assert scan["canary"]["scanned"] > 5_000_000, scan  # it read the whole address space, megabytes of it
    assert scan["canary"] == {**scan["canary"], "frames": 0, "gc": 0, "memory": 0}, scan


# The attack: collect every `assert ...candidate(...)...` line the candidate can reach, answer from them.
_THEFT = _SEARCH + r'''
import ast, gc, sys

def _lines_from_objects():
    texts = []
    def take(v):
        if isinstance(v, str) and "candidate(" in v:
            texts.append(v)
        elif isinstance(v, bytes) and b"candidate(" in v:
            texts.append(v.decode("utf-8", "replace"))
    f = sys._getframe()
    while f is not None:
        for v in list(f.f_locals.values()) + list(f.f_globals.values()):
            take(v)
            if isinstance(v, dict):
                for w in list(v.values()):
                    take(w)
        f = f.f_back
    for o in gc.get_objects():
        if o is texts:
            continue
        if isinstance(o, dict):
            for w in list(o.values()):
                take(w)
        elif isinstance(o, (list, tuple)):
            for w in list(o):
                take(w)
    return texts

def _lines_from_memory():
    texts, read = [], _reader()
    for lo, hi in list(_regions()):
        try:
            data = read(lo, min(hi - lo, 64 << 20))
        except (OSError, ValueError, OverflowError):
            continue
        i = data.find(b"assert ")
        while i >= 0:
            end = data.find(b"\n", i)
            texts.append(data[i:end if 0 <= end - i < 4000 else i + 4000].decode("utf-8", "replace"))
            i = data.find(b"assert ", i + 1)
    return texts

def _table():
    table = {}
    for text in _lines_from_objects() + _lines_from_memory():
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith("assert ") or "candidate(" not in line:
                continue
            try:
                test = ast.parse(line).body[0].test
            except (SyntaxError, IndexError, AttributeError):
                continue
            pair = _pair(test)
            if pair is not None:
                try:
                    table[repr(ast.literal_eval(pair[0]))] = ast.literal_eval(pair[1])
                except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                    pass
    return table

def _args(call):
    if isinstance(call, ast.Call) and getattr(call.func, "id", "") == "candidate" and not call.keywords:
        return ast.Tuple(elts=call.args, ctx=ast.Load())
    return None

def _pair(test):
    """(args, expected) of `candidate(a) == e`, `e == candidate(a)`, `candidate(a)`, `not candidate(a)`,
    `candidate(a) is True/False`, `abs(candidate(a) - e) < eps`."""
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not) and _args(test.operand) is not None:
        return _args(test.operand), ast.Constant(False)
    if _args(test) is not None:
        return _args(test), ast.Constant(True)
    if isinstance(test, ast.Compare) and len(test.ops) == 1:
        left, right = test.left, test.comparators[0]
        if isinstance(test.ops[0], (ast.Eq, ast.Is)):
            if _args(left) is not None:
                return _args(left), right
            if _args(right) is not None:
                return _args(right), left
        if (isinstance(test.ops[0], (ast.Lt, ast.LtE)) and isinstance(left, ast.Call)
                and getattr(left.func, "id", "") == "abs"
                and left.args and isinstance(left.args[0], ast.BinOp) and _args(left.args[0].left) is not None):
            return _args(left.args[0].left), left.args[0].right
    return None

_STOLEN = _table()
print("STOLEN", len(_STOLEN))

def ENTRY(*args):
    return _STOLEN.get(repr(args))
'''


def _null(problem: CodeProblem) -> str:
    return f"\ndef {problem.entry_point}(*args, **kwargs):\n    return None\n"


def _theft(problem: CodeProblem) -> str:
    return "\n" + _THEFT.replace("ENTRY", problem.entry_point)


def _forged(problems: list[CodeProblem], backend: str) -> tuple[list[tuple[str, int, int, int]], int]:
    """Problems where the attack beat the null solution: (task, its tests passed, the null's, total); and the
    number of tables that held anything."""
    with SandboxPool(make_sandbox(backend), concurrency=2, limits=LIMITS) as pool:
        async def go():
            null = await asyncio.gather(*[run_tests(pool, p, _null(p)) for p in problems])
            theft = await asyncio.gather(*[run_tests(pool, p, _theft(p)) for p in problems])
            return null, theft
        null, theft = asyncio.run(go())
    forged = [(p.task_id, t.passed_tests, n.passed_tests, t.total) for p, n, t in zip(problems, null, theft)
              if t.passed or t.passed_tests > n.passed_tests]
    stolen = sum(_stolen_count(t.result.stdout) > 0 for t in theft)
    assert all(t.result.status != "error" or "STOLEN" in t.result.stdout for t in theft), \
        [t.result.stderr[-500:] for t in theft if "STOLEN" not in t.result.stdout][:2]
    return forged, stolen


def _stolen_count(stdout: str) -> int:
    line = next((x for x in stdout.splitlines() if x.startswith("STOLEN ")), "STOLEN 0")
    return int(line.split()[1])


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_memory_theft_attack_forges_nothing(backend):
    by_id = {p.task_id: p for p in load_humaneval()}
    problems = [by_id[t] for t in ("HumanEval/0", "HumanEval/2", "HumanEval/13", "HumanEval/56")]
    forged, stolen = _forged(problems, backend)
    assert not forged, forged
    assert stolen == 0


@pytest.mark.heavy
@pytest.mark.parametrize("backend", BACKENDS)
def test_the_memory_theft_attack_forges_nothing_on_all_of_humaneval(backend):
    problems = load_humaneval()
    forged, stolen = _forged(problems, backend)
    print(f"{backend}: {len(problems)} problems, {len(forged)} forged, {stolen} tables with stolen tests")
    assert not forged, forged
    assert stolen == 0 and len(problems) == 164
