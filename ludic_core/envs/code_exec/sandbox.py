"""Run untrusted Python in an isolation layer, with limits, and say what happened.

A policy being trained will, sooner or later, write code that loops forever,
eats memory, forks, opens sockets or reads secrets. Model-written code never
runs in our process: a `Sandbox` runs a program in a fresh process tree and
returns an `ExecResult`; whatever the program does, the call returns within
`Limits.wall_s` (plus a second to reap) and the process tree is gone.

The program runs as `python -I -S -B` (isolated mode, no `site`): the
standard library only, which is what HumanEval-style code needs, and `site`'s
import costs ~30 ms a run here (more than the rest of the sandbox).
`site_packages=True` gives it the interpreter's own third-party packages
(never the project's virtual environment).

Backends:
- `BwrapSandbox`: bubblewrap, started afresh for every run. No network (own
  net namespace), own pid namespace (whatever the program left behind is
  killed when it ends), a read-only view of only the interpreter's prefix and
  the system libraries, a private size-capped tmpfs at /tmp, a cleared
  environment, and rlimits on CPU seconds, address space, processes and file
  size, set inside the sandbox before the program starts.
- `WarmBwrapSandbox` (`warm.py`; `make_sandbox`'s default as root): the same
  sandbox kept alive per concurrent slot, each run a process forked from a
  warm server inside it (~10 ms a run instead of ~35-65 ms).
- `DockerSandbox`: the same limits through `docker run` / `podman run`, where a
  daemon is present (none on a machine without one; `available()` says).
- `SubprocessSandbox`: rlimits and a cleared environment but no isolation:
  the program sees the filesystem and the network, and runs as our uid (as
  root, the process limit does not bind). Opt-in only
  (`allow_unsandboxed=True`), and it warns on every start.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from ludic_core.frozen import FrozenModel

__all__ = ["Limits", "ExecResult", "Sandbox", "SandboxError", "BwrapSandbox", "DockerSandbox",
           "SubprocessSandbox", "make_sandbox"]

log = logging.getLogger(__name__)

Status = Literal["ok", "error", "timeout", "killed"]


class SandboxError(RuntimeError):
    """The sandbox itself could not run (missing binary, no user namespaces): not the program's fault."""


class Limits(FrozenModel):
    """What one execution may use. Exceeding one ends it as a failed attempt."""

    wall_s: float = Field(10.0, gt=0, description="wall-clock limit; then the whole process tree is killed")
    cpu_s: int = Field(10, ge=1, description="RLIMIT_CPU seconds")
    memory_mb: int = Field(1024, ge=64, description="RLIMIT_AS: address space of each process")
    processes: int = Field(32, ge=1, description="RLIMIT_NPROC: processes and threads the program may run")
    file_mb: int = Field(16, ge=1, description="RLIMIT_FSIZE: the largest file it may write (stdout included)")
    tmp_mb: int = Field(64, ge=1, description="size of its private /tmp (bubblewrap)")
    output_chars: int = Field(8192, ge=0, description="stdout / stderr kept in the result (their tails)")


@dataclass(frozen=True)
class ExecResult:
    """`ok`: exit status 0; `error`: another exit status; `timeout`: killed at
    the wall-clock limit; `killed`: ended by a signal (CPU or file-size limit,
    out of memory)."""

    status: Status
    returncode: int | None
    stdout: str
    stderr: str
    wall_s: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def reason(self) -> str:
        """One line for a log or an observation."""
        if self.status == "ok":
            return "exit status 0"
        if self.status == "timeout":
            return f"timed out after {self.wall_s:.1f} s"
        if self.status == "killed":
            return f"killed by {_signal_name(-(self.returncode or 0))}"
        tail = self.stderr.strip().splitlines()
        return f"exit status {self.returncode}" + (f": {tail[-1]}" if tail else "")


@runtime_checkable
class Sandbox(Protocol):
    """Runs a Python program under `limits`; `stdin` is its standard input."""

    name: str

    def run(self, program: str, *, limits: Limits, stdin: str = "") -> ExecResult: ...


# Runs inside the sandbox as its first process. The program runs as a child
# under its own uid (when we are root: an unprivileged uid of its own, so
# RLIMIT_NPROC binds, which it never does for root, and it cannot signal this
# process) with the limits set; once it exits, everything it left behind in
# the pid namespace is killed (`reap`, only where there is one), and its
# status is passed on (128 + n for signal n).
_LAUNCHER = """\
import os, resource, signal, sys
cfg = {cfg}
pid = os.fork()
if pid == 0:
    if cfg["uid"] is not None:
        os.setgroups([])
        os.setgid(cfg["uid"])
        os.setuid(cfg["uid"])
    for name, (soft, hard) in cfg["limits"].items():
        resource.setrlimit(getattr(resource, name), (soft, hard))
    os.execv(sys.executable, [sys.executable, *cfg["flags"], sys.argv[1]])
_, status = os.waitpid(pid, 0)
if cfg["reap"]:
    try:
        os.kill(-1, signal.SIGKILL)
    except ProcessLookupError:
        pass
os._exit(128 + os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status))
"""


def _rlimits(limits: Limits, *, nproc_base: int) -> dict[str, tuple[int, int]]:
    """(soft, hard) per resource.RLIMIT_* name. CPU: SIGXCPU at the soft limit, SIGKILL a second later."""
    mb = 1024 * 1024
    return {"RLIMIT_CPU": (limits.cpu_s, limits.cpu_s + 1), "RLIMIT_AS": (limits.memory_mb * mb,) * 2,
            "RLIMIT_NPROC": (nproc_base + limits.processes,) * 2, "RLIMIT_FSIZE": (limits.file_mb * mb,) * 2,
            "RLIMIT_CORE": (0, 0)}


def _launcher(limits: Limits, *, uid: int | None, nproc_base: int, reap: bool, site: bool) -> str:
    flags = ["-I", "-B"] + ([] if site else ["-S"])
    return _LAUNCHER.format(cfg=repr({"uid": uid, "limits": _rlimits(limits, nproc_base=nproc_base), "reap": reap,
                                      "flags": flags}))


UID_BASE = 1_200_000
_UIDS_PER_PROCESS = 1024
_uid_free: list[int] | None = None
_uid_lock = threading.Lock()


class _UidSlots:
    """When we run as root: one unprivileged uid per execution in flight, so
    each program's RLIMIT_NPROC counts its own processes only (the count is
    per uid, machine-wide). The uids come from one list per process (every
    sandbox of the process draws from it), offset by our pid so two processes
    on a machine rarely share one. Otherwise the program keeps our uid, and
    its process limit is set above the tasks we already run."""

    def __init__(self, drop: bool = True) -> None:
        self.root = drop and os.geteuid() == 0

    def acquire(self) -> int | None:
        global _uid_free
        if not self.root:
            return None
        with _uid_lock:
            if _uid_free is None:
                base = UID_BASE + (os.getpid() % 1024) * _UIDS_PER_PROCESS
                _uid_free = list(range(base + _UIDS_PER_PROCESS - 1, base - 1, -1))
            if not _uid_free:
                raise SandboxError(f"more than {_UIDS_PER_PROCESS} sandbox executions in flight")
            return _uid_free.pop()

    def release(self, uid: int | None) -> None:
        if uid is not None:
            with _uid_lock:
                _uid_free.append(uid)

    def nproc_base(self) -> int:
        return 0 if self.root else _tasks_of(os.getuid())


class _ProcessSandbox:
    """Shared machinery: write the program to a private host dir, run the
    backend's command in its own session, kill its process group at the
    deadline, read back the (size-capped) output files."""

    name = "process"
    signal_exits = True  # the launcher reports "killed by signal n" as exit status 128 + n
    reap = False  # whether the command runs in its own pid namespace (then leftovers are killed at exit)

    def __init__(self, site_packages: bool = False) -> None:
        self._uids = _UidSlots()
        self.site_packages = site_packages

    def command(self, workdir: Path, limits: Limits) -> list[str]:
        raise NotImplementedError

    def nproc_base(self) -> int:
        """Tasks that already count against the program's RLIMIT_NPROC."""
        return self._uids.nproc_base()

    def env(self) -> dict[str, str]:
        return {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}

    def run(self, program: str, *, limits: Limits, stdin: str = "") -> ExecResult:
        uid = self._uids.acquire()
        try:
            with tempfile.TemporaryDirectory(prefix="ludic-sandbox-") as tmp:
                work = Path(tmp)
                work.chmod(0o711)  # the program's own uid must reach main.py (it cannot list the dir)
                (work / "main.py").write_text(program)
                (work / "launch.py").write_text(_launcher(limits, uid=uid, nproc_base=self.nproc_base(),
                                                          reap=self.reap, site=self.site_packages))
                for f in ("main.py", "launch.py"):
                    (work / f).chmod(0o644)
                return self._run(work, limits, stdin)
        finally:
            self._uids.release(uid)

    def _run(self, work: Path, limits: Limits, stdin: str) -> ExecResult:
        out_path, err_path = work / "stdout", work / "stderr"
        start = time.monotonic()
        with open(out_path, "wb") as out, open(err_path, "wb") as err:
            proc = subprocess.Popen(self.command(work, limits), stdin=subprocess.PIPE, stdout=out, stderr=err,
                                    env=self.env(), cwd=work, start_new_session=True, close_fds=True)
            timed_out = False
            try:
                proc.communicate(stdin.encode(), timeout=limits.wall_s)
            except subprocess.TimeoutExpired:
                timed_out = True
            except BrokenPipeError:  # it exited before reading its input
                pass
            finally:
                _kill_group(proc)
                proc.wait()
        wall = time.monotonic() - start
        code = proc.returncode
        stdout, stderr = _tail(out_path, limits.output_chars), _tail(err_path, limits.output_chars)
        if timed_out:
            status: Status = "timeout"
        elif code == 0:
            status = "ok"
        elif code < 0:
            status = "killed"
        elif self.signal_exits and code > 128:
            status, code = "killed", -(code - 128)
        else:
            status = "error"
        return ExecResult(status=status, returncode=code, stdout=stdout, stderr=stderr, wall_s=wall)


class BwrapSandbox(_ProcessSandbox):
    """bubblewrap: no network, own pid namespace, read-only interpreter and
    system libraries only, private /tmp, cleared environment, rlimits."""

    name = "bwrap"
    reap = True

    def __init__(self, bwrap: str | None = None, python: str | None = None, site_packages: bool = False) -> None:
        super().__init__(site_packages)
        self.bwrap = bwrap or shutil.which("bwrap")
        if self.bwrap is None:
            raise SandboxError("bubblewrap is not installed (Debian: apt-get install bubblewrap); "
                               "it is the sandbox model-written code runs in")
        self.python = python or _base_python()
        self.prefix = _prefix_of(self.python)

    def root_view(self, limits: Limits) -> list[str]:
        """bwrap arguments up to the command: namespaces, a cleared environment,
        read-only system libraries and interpreter, /proc, /dev, a private /tmp."""
        # root needs no user namespace (and the program gets a uid of its own); others need one
        ns = ["--unshare-net", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if os.geteuid() != 0:
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
        return cmd + ["--proc", "/proc", "--dev", "/dev",
                      "--perms", "1777", "--size", str(limits.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
                      "--perms", "0755", "--dir", "/sandbox", "--chdir", "/tmp"]

    def command(self, workdir: Path, limits: Limits) -> list[str]:
        return self.root_view(limits) + [
            "--ro-bind", str(workdir / "main.py"), "/sandbox/main.py",
            "--ro-bind", str(workdir / "launch.py"), "/sandbox/launch.py",
            "--", self.python, "-I", "-S", "-B", "/sandbox/launch.py", "/sandbox/main.py"]


class DockerSandbox(_ProcessSandbox):
    """`docker run` (or podman) with no network, a read-only root, a tmpfs
    /tmp and the same rlimits; needs a daemon and the image pulled."""

    name = "docker"
    reap = True

    def __init__(self, image: str = "python:3.11-slim", cli: str | None = None, site_packages: bool = False) -> None:
        super().__init__(site_packages=site_packages)
        self._uids = _UidSlots(drop=False)  # the container runs as --user below; --pids-limit binds
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

    def command(self, workdir: Path, limits: Limits) -> list[str]:
        return [self.cli, "run", "--rm", "-i", "--network", "none", "--read-only",
                "--tmpfs", f"/tmp:size={limits.tmp_mb}m", "--memory", f"{limits.memory_mb}m",
                "--pids-limit", str(limits.processes), "--cap-drop", "ALL", "--security-opt", "no-new-privileges",
                "-v", f"{workdir / 'main.py'}:/sandbox/main.py:ro", "-v", f"{workdir / 'launch.py'}:/sandbox/launch.py:ro",
                "--user", "65534:65534", "-w", "/tmp", "--stop-timeout", "1", self.image,
                "python", "-I", "-S", "-B", "/sandbox/launch.py", "/sandbox/main.py"]


class SubprocessSandbox(_ProcessSandbox):
    """No isolation: rlimits and a cleared environment only. For machines
    without bubblewrap, and only when asked for; warns every time it starts."""

    name = "subprocess"

    def __init__(self, *, allow_unsandboxed: bool = False, python: str | None = None,
                 site_packages: bool = False) -> None:
        super().__init__(site_packages=site_packages)
        self._uids = _UidSlots(drop=False)  # our uid: the interpreter may not be readable by another
        if not allow_unsandboxed:
            raise SandboxError("the subprocess backend does not isolate model-written code (it can read your files "
                               "and use the network); pass allow_unsandboxed=True to use it anyway")
        self.python = python or _base_python()

    def command(self, workdir: Path, limits: Limits) -> list[str]:
        log.warning("running model-written code WITHOUT a sandbox (subprocess backend): it can read files and "
                    "use the network")
        return [self.python, "-I", "-S", "-B", str(workdir / "launch.py"), str(workdir / "main.py")]


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


def _tail(path: Path, n: int) -> str:
    size = path.stat().st_size
    with open(path, "rb") as f:
        if size > n:
            f.seek(size - n)
        return f.read().decode("utf-8", "replace")


def _signal_name(n: int) -> str:
    try:
        return signal.Signals(n).name
    except ValueError:
        return f"signal {n}"


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
