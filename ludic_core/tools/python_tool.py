"""`python`: run the model's code in the bubblewrap sandbox and show it what came out.

The code comes from a policy being trained, so it runs where model-written code always runs here:
`ludic_core.envs.code_exec`'s sandbox (no network, a read-only view of the interpreter and system
libraries only, a private /tmp, a cleared environment, rlimits, seccomp; the threat model is in
docs/threat-model.md), under small per-call limits (`DEFAULT_LIMITS`: 5 s, 512 MB, 16 processes)
and with its output capped (`OUTPUT_CHARS`). Each call gets a fresh sandbox (`bwrap-cold`): nothing
a call leaves (files, processes, variables) reaches the next, so a call's result depends on its
code alone. There is no unsandboxed fallback: without bubblewrap the call fails, saying so.

The pool is made on the first call (once per process, whichever thread or event loop gets there
first) and closed at exit; `configure_python_tool` changes its backend, concurrency or limits.
"""

from __future__ import annotations

import atexit
import threading
from typing import Any

from ludic_core.envs.code_exec.execution import ExecResult, Limits, SandboxError
from ludic_core.envs.code_exec.pool import SandboxPool
from ludic_core.envs.code_exec.sandbox import Backend, make_sandbox

__all__ = ["python", "configure_python_tool", "DEFAULT_LIMITS", "OUTPUT_CHARS", "MAX_CODE_CHARS"]

OUTPUT_CHARS = 4096  # of stdout and stderr together, the tails kept (a traceback's end is its point)
MAX_CODE_CHARS = 32_768
# the sandbox keeps each stream's last `output_chars` *bytes*: 4 per character shown, so the tail
# it returns always holds OUTPUT_CHARS characters, and a cut there is seen here
_KEPT_BYTES = 4 * OUTPUT_CHARS + 4
DEFAULT_LIMITS = Limits(wall_s=5.0, cpu_s=5, memory_mb=512, processes=16, file_mb=8, tmp_mb=32,
                        output_chars=_KEPT_BYTES)
_STDERR_SHARE = 1536  # the most of stderr shown beside a non-empty stdout

_lock = threading.Lock()
_pool: SandboxPool | None = None
_settings: dict[str, Any] = {"backend": "bwrap-cold", "concurrency": 4, "limits": DEFAULT_LIMITS}


def configure_python_tool(*, backend: Backend = "bwrap-cold", concurrency: int = 4,
                          limits: Limits | None = None) -> None:
    """Set the sandbox the `python` tool runs in (closing the current pool; the next call makes one).

    `backend`: "bwrap-cold" (a fresh bubblewrap sandbox per call, the default), "bwrap" /
    "bwrap-warm" (a fork server per slot, same isolation per run, as root) or "docker". `limits`'
    `output_chars` is always set to what the tool needs to show `OUTPUT_CHARS` characters and see
    a cut. The tool's description (its docstring) quotes the default limits.
    """
    if backend == "subprocess":
        raise ValueError("the python tool never runs model-written code unsandboxed; use a bubblewrap backend")
    if concurrency < 1:
        raise ValueError(f"concurrency must be >= 1, not {concurrency}")
    limits = limits or DEFAULT_LIMITS
    limits = limits.model_copy(update={"output_chars": _KEPT_BYTES})
    global _pool
    with _lock:
        old, _pool = _pool, None
        _settings.update(backend=backend, concurrency=concurrency, limits=limits)
    if old is not None:
        old.close()


def _get_pool() -> SandboxPool:
    global _pool
    with _lock:
        if _pool is None:
            # BwrapSandbox raises SandboxError naming bubblewrap when it is missing
            sandbox = make_sandbox(_settings["backend"])
            _pool = SandboxPool(sandbox, concurrency=_settings["concurrency"], limits=_settings["limits"])
            if not _settings.get("atexit"):
                atexit.register(_close_pool)
                _settings["atexit"] = True
        return _pool


def _close_pool() -> None:
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.close()


async def python(code: str) -> str:
    """Run a Python program in a fresh sandbox and return what it printed (stdout, then stderr).
    Standard library only, no network, nothing kept between calls, 5 seconds and 512 MB per call.
    Values are not echoed: print() what you want to see. Output is cut to its last 4096 characters.

    Args:
        code: the complete Python program to run
    """
    if not isinstance(code, str):
        raise ValueError(f"code must be a string, got {type(code).__name__}")
    if len(code) > MAX_CODE_CHARS:
        raise ValueError(f"code is {len(code):,} characters long; at most {MAX_CODE_CHARS:,} are allowed")
    pool = _get_pool()
    result = await pool.arun(code)
    if result.status == "error" and result.returncode is None:  # the sandbox failed, not the program
        raise SandboxError(result.stderr or "the sandbox failed")
    return _observation(result, pool.limits)


def _observation(result: ExecResult, limits: Limits) -> str:
    """stdout, then stderr, then how the run ended when it did not exit normally; at most OUTPUT_CHARS of output."""
    stderr_budget = _STDERR_SHARE if result.stdout else OUTPUT_CHARS
    stderr = _tail(result.stderr, stderr_budget, limits)
    stdout = _tail(result.stdout, OUTPUT_CHARS - min(len(result.stderr), stderr_budget), limits)
    parts = [p for p in (stdout, stderr) if p]
    if result.status == "timeout":
        parts.append(f"[timed out after {limits.wall_s:g} s: the program was stopped]")
    elif result.status == "killed":
        parts.append(f"[{result.reason()}: a limit was reached ({limits.cpu_s} s CPU, {limits.memory_mb} MB, "
                     f"{limits.file_mb} MB files)]")
    elif result.status == "error":
        parts.append(f"[exit status {result.returncode}]")
    text = "\n".join(p.rstrip("\n") for p in parts)
    return text if text else "[no output: the program printed nothing; use print() to see a value]"


def _tail(text: str, n: int, limits: Limits) -> str:
    """The last `n` characters, marked when anything was cut (here, or by the sandbox)."""
    cut_by_sandbox = len(text.encode("utf-8", "replace")) >= limits.output_chars - 3  # a split character: U+FFFD
    if len(text) <= n and not cut_by_sandbox:
        return text
    return "[truncated: only the last characters are shown]\n" + text[-n:]
