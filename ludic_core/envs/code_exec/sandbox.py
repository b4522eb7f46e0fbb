"""Run untrusted Python in an isolation layer, with limits, and say what happened.

A policy being trained will, sooner or later, write code that loops forever,
eats memory, forks, opens sockets, reads secrets, or forges its own reward.
Model-written code never runs in our process: a `Sandbox` runs a program in a
fresh process tree and returns an `ExecResult`; whatever the program does, the
call returns within `Limits.wall_s` (plus a few seconds to reap) and the
process tree is gone. A `Judge` (the problem's tests) runs beside it as a
second process the candidate cannot reach, calling the candidate's function
with plain data and writing the verdict where only we read it (`jail.py`,
`crossing.py`; the threat model is in docs/threat-model.md).

Programs run as `python -I -S -B` (isolated mode, no `site`): the standard
library only, which is what HumanEval-style code needs.

Backends:
- `BwrapSandbox`: bubblewrap, started afresh for every run. No network, own
  pid namespace, a read-only view of only the interpreter's prefix and the
  system libraries, a private /tmp, a cleared environment, rlimits, a seccomp
  filter; as root also a uid per process, a memory cgroup per run, and the
  run's own mount and IPC namespace.
- `WarmBwrapSandbox` (`warm.py`; `make_sandbox`'s default as root): the same,
  kept alive per concurrent slot, each run forked from a warm server inside it.
- `DockerSandbox`: the same jail through `docker run` / `podman run`, where a
  daemon is present (`available()` says).
- `SubprocessSandbox`: rlimits, a cleared environment and the judge split, but
  no isolation: the program sees the filesystem and the network. Opt-in only
  (`allow_unsandboxed=True`), and it warns on every start.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from ludic_core.envs.code_exec import cgroup
from ludic_core.envs.code_exec.execution import ExecResult, Judge, Limits, Sandbox, SandboxError, Status
from ludic_core.envs.code_exec.uids import UidBlock

# the types live in `execution`; re-exported here, where a backend's user looks for them
__all__ = ["Limits", "ExecResult", "Judge", "Sandbox", "SandboxError", "BwrapSandbox", "DockerSandbox",
           "SubprocessSandbox", "make_sandbox"]

log = logging.getLogger(__name__)

JAIL_FILES = ("jail.py", "seccomp.py", "crossing.py", "rooms.py")
_HERE = Path(__file__).parent
_GRACE_S = 5.0


def _rlimits(limits: Limits, *, nproc_base: int, address_space: bool = True) -> dict[str, tuple[int, int]]:
    """(soft, hard) per resource.RLIMIT_* name. CPU: SIGXCPU at the soft limit, SIGKILL a second later."""
    mb = 1024 * 1024
    out = {"RLIMIT_CPU": (limits.cpu_s, limits.cpu_s + 1), "RLIMIT_NPROC": (nproc_base + limits.processes,) * 2,
           "RLIMIT_FSIZE": (limits.file_mb * mb,) * 2, "RLIMIT_CORE": (0, 0)}
    if address_space:
        out["RLIMIT_AS"] = (limits.memory_mb * mb,) * 2
    return out


def jail_request(program: str, limits: Limits, stdin: str, judge: Judge | None, nproc_base: int,
                 cgroup_bound: bool) -> str:
    """One JSON line for `jail.py`. With a memory cgroup the limit binds the run; RLIMIT_AS stays as well
    (a generous 4x per process) so one process still fails fast with MemoryError."""
    rl = _rlimits(limits, nproc_base=nproc_base)
    if cgroup_bound:
        rl["RLIMIT_AS"] = (4 * limits.memory_mb * 1024 * 1024,) * 2
    return json.dumps({"program": program, "stdin": stdin, "wall_s": limits.wall_s, "tmp_mb": limits.tmp_mb,
                       "memory_mb": limits.memory_mb, "output_chars": limits.output_chars, "rlimits": rl,
                       "judge": judge.program if judge else None, "serve": judge.entry_point if judge else None})


def result_from_reply(reply: Any, judged: bool, wall_s: float) -> ExecResult:
    """The jail's answer as an ExecResult; a missing or unreadable answer is the run's failure, said as such."""
    if not isinstance(reply, dict) or reply.get("error") or "timed_out" not in reply:
        why = reply.get("error") if isinstance(reply, dict) else None
        log.warning("sandbox run failed outside the program: %s", why or "no answer")
        return ExecResult(status="error", returncode=None, stdout="", stderr=f"the sandbox failed: {why or 'no answer'}",
                          wall_s=wall_s)
    judge = reply.get("judge") or {}
    code = judge.get("returncode") if judged else reply.get("returncode")
    if reply["timed_out"]:
        status: Status = "timeout"
    elif code == 0:
        status = "ok"
    elif isinstance(code, int) and code < 0:
        status = "killed"
    else:
        status = "error"
    return ExecResult(status=status, returncode=code, stdout=str(reply.get("stdout", "")),
                      stderr=str(reply.get("stderr", "")), wall_s=float(reply.get("wall_s", wall_s)),
                      verdict=str(judge.get("verdict", "")), judge_stderr=str(judge.get("stderr", "")))


class _JailSandbox:
    """A fresh jail per run: the backend's command starts `jail.py` once, the
    request goes in on stdin, the answer comes back on stdout."""

    name = "jail"
    private = False  # per-run mount + IPC namespace (needs the jail to hold CAP_SYS_ADMIN)

    def __init__(self, site_packages: bool = False) -> None:
        self.site_packages = site_packages
        self.drop_uids = os.geteuid() == 0

    def command(self, limits: Limits, cfg: dict, cgroup_dir: Path | None) -> list[str]:
        raise NotImplementedError

    def nproc_base(self) -> int:
        """Tasks that already count against the program's RLIMIT_NPROC (those of our uid when we keep it)."""
        return 0 if self.drop_uids else _tasks_of(os.getuid())

    def run(self, program: str, *, limits: Limits, stdin: str = "", judge: Judge | None = None) -> ExecResult:
        with self._workdir() as tmp:
            return self._run(program, limits, stdin, judge, tmp)

    def _workdir(self) -> contextlib.AbstractContextManager[str]:
        """The runs' working directory (inside the sandbox: its private /tmp)."""
        return contextlib.nullcontext("/tmp")

    def _run(self, program: str, limits: Limits, stdin: str, judge: Judge | None, tmp: str) -> ExecResult:
        uids = UidBlock.acquire(2) if self.drop_uids else None
        cg = cgroup.run_cgroup(uids[0]) if uids and self.private else None
        start = time.monotonic()
        try:
            cfg = {"uids": uids, "private": self.private, "cgroup": "/jail/cgroup" if cg else None, "once": True,
                   "tmp": tmp, "site": self.site_packages}
            request = jail_request(program, limits, stdin, judge, self.nproc_base(), cg is not None)
            reply = self._exchange(self.command(limits, cfg, cg), request, limits.wall_s + _GRACE_S)
        finally:
            cgroup.remove(cg)
            if uids:
                UidBlock.release(uids)
        return result_from_reply(reply, judge is not None, time.monotonic() - start)

    def _exchange(self, cmd: list[str], request: str, timeout: float) -> Any:
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err,
                                    env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}, start_new_session=True)
            try:
                out, _ = proc.communicate(request.encode() + b"\n", timeout=timeout)
            except subprocess.TimeoutExpired:
                out = b""
            finally:
                _kill_group(proc)
                proc.wait()
            try:
                return json.loads(out)
            except ValueError:
                err.seek(0)
                return {"error": f"no answer from the jail (exit status {proc.returncode}): "
                                 f"{err.read()[-500:].decode('utf-8', 'replace').strip()}"}


class BwrapSandbox(_JailSandbox):
    """bubblewrap: no network, own pid namespace, read-only interpreter and
    system libraries only, private /tmp, cleared environment, rlimits, seccomp."""

    name = "bwrap"

    def __init__(self, bwrap: str | None = None, python: str | None = None, site_packages: bool = False) -> None:
        super().__init__(site_packages)
        self.bwrap = bwrap or shutil.which("bwrap")
        if self.bwrap is None:
            raise SandboxError("bubblewrap is not installed (Debian: apt-get install bubblewrap); "
                               "it is the sandbox model-written code runs in")
        self.python = python or _base_python()
        self.prefix = _prefix_of(self.python)
        self.private = self.drop_uids

    def root_view(self, limits: Limits) -> list[str]:
        """bwrap arguments up to the command: namespaces, a cleared environment,
        read-only system libraries and interpreter, /proc, /dev, a private /tmp."""
        ns = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if self.drop_uids:  # root needs no user namespace; the jail keeps only what it needs to set runs up
            ns += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID",
                   "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_KILL"]
        else:
            ns.append("--unshare-user")
        cmd = [self.bwrap, *ns, "--die-with-parent", "--new-session", "--clearenv",
               "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp", "--setenv", "LANG", "C.UTF-8"]
        for d in ("/usr", "/lib", "/lib64", "/bin", "/sbin"):
            p = Path(d)
            if p.is_symlink():  # merged /usr: /lib -> usr/lib
                cmd += ["--symlink", os.readlink(p), d]
            elif p.is_dir():
                cmd += ["--ro-bind", d, d]
        if not self.prefix.startswith("/usr/"):
            for parent in reversed(Path(self.prefix).parents[:-1]):  # e.g. /root: traversable, and empty
                cmd += ["--perms", "0755", "--dir", str(parent)]
            cmd += ["--ro-bind", self.prefix, self.prefix]
        cmd += ["--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", str(limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
                "--perms", "0755", "--dir", "/sandbox", "--perms", "0755", "--dir", "/jail", "--chdir", "/tmp"]
        for f in JAIL_FILES:
            cmd += ["--ro-bind", str(_HERE / f), f"/jail/{f}"]
        return cmd

    def command(self, limits: Limits, cfg: dict, cgroup_dir: Path | None) -> list[str]:
        cg = ["--bind", str(cgroup_dir), "/jail/cgroup"] if cgroup_dir else []
        return self.root_view(limits) + cg + ["--", self.python, "-I", "-S", "-B", "/jail/jail.py", json.dumps(cfg)]


class DockerSandbox(_JailSandbox):
    """`docker run` (or podman) with no network, a read-only root, a tmpfs
    /tmp, a memory limit for the whole container and the jail's rlimits and
    seccomp filter; needs a daemon and the image pulled."""

    name = "docker"

    def __init__(self, image: str = "python:3.11-slim", cli: str | None = None, site_packages: bool = False) -> None:
        super().__init__(site_packages=site_packages)
        self.drop_uids = False  # the container runs as --user below; --pids-limit binds
        self.cli = cli or shutil.which("docker") or shutil.which("podman")
        if self.cli is None:
            raise SandboxError("neither docker nor podman is installed")
        self.image = image

    def nproc_base(self) -> int:
        return 0

    def available(self) -> bool:
        """Whether a daemon answers (the CLI alone is not enough)."""
        try:
            return subprocess.run([self.cli, "info"], capture_output=True, timeout=10).returncode == 0
        except (OSError, subprocess.TimeoutExpired):
            return False

    def command(self, limits: Limits, cfg: dict, cgroup_dir: Path | None) -> list[str]:
        mounts = [a for f in JAIL_FILES for a in ("-v", f"{_HERE / f}:/jail/{f}:ro")]
        return [self.cli, "run", "--rm", "-i", "--network", "none", "--read-only",
                "--tmpfs", f"/tmp:size={limits.tmp_mb}m", "--memory", f"{limits.memory_mb}m",
                "--pids-limit", str(limits.processes), "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                *mounts, "--user", "65534:65534", "-w", "/tmp", "--stop-timeout", "1", self.image,
                "python", "-I", "-S", "-B", "/jail/jail.py", json.dumps(cfg)]


class SubprocessSandbox(_JailSandbox):
    """No isolation: rlimits, a cleared environment and the judge split only.
    For machines without bubblewrap, and only when asked for; warns every time."""

    name = "subprocess"

    def __init__(self, *, allow_unsandboxed: bool = False, python: str | None = None,
                 site_packages: bool = False) -> None:
        super().__init__(site_packages=site_packages)
        self.drop_uids = False  # our uid: the interpreter may not be readable by another
        if not allow_unsandboxed:
            raise SandboxError("the subprocess backend does not isolate model-written code (it can read your files "
                               "and use the network); pass allow_unsandboxed=True to use it anyway")
        self.python = python or _base_python()

    def _workdir(self) -> contextlib.AbstractContextManager[str]:
        log.warning("running model-written code WITHOUT a sandbox (subprocess backend): it can read files and "
                    "use the network")
        return tempfile.TemporaryDirectory(prefix="ludic-sandbox-")

    def command(self, limits: Limits, cfg: dict, cgroup_dir: Path | None) -> list[str]:
        return [self.python, "-I", "-S", "-B", str(_HERE / "jail.py"), json.dumps(cfg)]


Backend = Literal["bwrap", "bwrap-warm", "bwrap-cold", "docker", "subprocess"]


def make_sandbox(backend: Backend = "bwrap", *, allow_unsandboxed: bool = False,
                 site_packages: bool = False) -> Sandbox:
    """`bwrap`: the warm fork server per slot where it can run (as root, standard
    library only), else a cold sandbox per run; `bwrap-warm` / `bwrap-cold` pick one."""
    if backend in ("bwrap", "bwrap-warm"):
        warm_possible = os.geteuid() == 0 and not site_packages
        if backend == "bwrap-warm" or warm_possible:
            from ludic_core.envs.code_exec.warm import WarmBwrapSandbox

            return WarmBwrapSandbox(site_packages=site_packages)
        return BwrapSandbox(site_packages=site_packages)
    if backend == "bwrap-cold":
        return BwrapSandbox(site_packages=site_packages)
    if backend == "docker":
        return DockerSandbox(site_packages=site_packages)
    if backend == "subprocess":
        return SubprocessSandbox(allow_unsandboxed=allow_unsandboxed, site_packages=site_packages)
    raise ValueError(f"unknown sandbox backend {backend!r}; use 'bwrap', 'bwrap-warm', 'bwrap-cold', 'docker' "
                     "or 'subprocess'")


def _base_python() -> str:
    """The real interpreter behind this (virtual) environment: the sandbox
    needs its stdlib, never the venv's site-packages."""
    exe = getattr(sys, "_base_executable", None) or sys.executable
    return os.path.realpath(exe)


def _prefix_of(python: str) -> str:
    """The install prefix holding `python`'s stdlib (bin/.. of the real binary)."""
    return str(Path(python).parent.parent)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _tasks_of(uid: int) -> int:
    """Processes and threads running under `uid` now (what RLIMIT_NPROC counts)."""
    n = 0
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue
        real = next((line.split()[1] for line in text.splitlines() if line.startswith("Uid:")), None)
        threads = next((line.split()[1] for line in text.splitlines() if line.startswith("Threads:")), "1")
        if real is not None and int(real) == uid:
            n += int(threads)
    return n
