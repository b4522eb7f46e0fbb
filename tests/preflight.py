"""Preflight of `make test` and `make test-heavy`: the system tools the suite needs.

The tests start real servers and tools; without them pytest would report dozens of errors.
This runs first (with the system python3, before .venv exists: standard library only) and
checks each tool where the tests look for it. When some are missing:

- as root with apt-get on the PATH, it installs their Debian packages (`apt-get update` only
  when the package lists do not know one of them, or an install from stale lists fails) and
  says so;
- otherwise (not root, no apt-get, or LUDIC_PREFLIGHT_INSTALL=0) it prints one message naming
  each missing tool and the one command that installs them all, and exits 1: pytest never starts.

    python3 tests/preflight.py            # the tools of `make test`
    python3 tests/preflight.py --heavy    # and those of `make test-heavy`
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Callable, Sequence

# where Debian's postgresql package puts initdb and pg_ctl (not on the PATH);
# tests/prefect_layer/postgres.py looks there too
POSTGRES_BIN_DIRS = "/usr/lib/postgresql/*/bin"


@dataclass(frozen=True)
class Tool:
    name: str  # what the message calls it
    package: str  # the Debian package that installs it
    why: str  # which tests need it
    heavy: bool = False  # only `make test-heavy` needs it
    names: tuple[str, ...] = ()  # any one of these executables will do (default: name)
    dirs: str | None = None  # a glob of directories searched after the PATH
    user: str | None = None  # a system user that must exist when running as root

    def found(self, path: str, euid: int) -> bool:
        if self.user is not None:
            if euid != 0:
                return True
            try:
                pwd.getpwnam(self.user)
            except KeyError:
                return False
            return True
        extra = sorted(glob.glob(self.dirs)) if self.dirs else []
        return any(shutil.which(n, path=d) for n in (self.names or (self.name,)) for d in (path, *extra) if d)


_PG = "a throwaway PostgreSQL server (tests/prefect_layer/postgres.py, test_deployments.py)"
TOOLS: tuple[Tool, ...] = (
    Tool("bwrap", "bubblewrap", "the sandbox model-written code runs in (tests/envs/test_sandbox.py, the code env)"),
    Tool("redis-server", "redis-server", "the `redis` tests and pipeline RL start their own server"),
    Tool("pgrep", "procps", "tests/inference/test_vllm_server.py finds a server's child process with it"),
    Tool("chromium", "chromium", "tests/prefect_layer/test_ui_browser.py opens the Prefect UI in it", heavy=True,
         names=("chromium", "chromium-browser", "google-chrome")),
    Tool("chromedriver", "chromium-driver", "Selenium drives chromium through it (test_ui_browser.py)", heavy=True),
    Tool("initdb", "postgresql", _PG, heavy=True, dirs=POSTGRES_BIN_DIRS),
    Tool("pg_ctl", "postgresql", _PG, heavy=True, dirs=POSTGRES_BIN_DIRS),
    Tool("createdb", "postgresql", _PG, heavy=True, dirs=POSTGRES_BIN_DIRS),
    Tool("psql", "postgresql", _PG, heavy=True),
    Tool("the postgres user", "postgresql", "as root the server runs as `postgres`", heavy=True, user="postgres"),
)


def missing_tools(heavy: bool, path: str, euid: int) -> list[Tool]:
    return [t for t in TOOLS if (heavy or not t.heavy) and not t.found(path, euid)]


def packages(tools: Sequence[Tool]) -> list[str]:
    return list(dict.fromkeys(t.package for t in tools))


def install_command(tools: Sequence[Tool], euid: int) -> str:
    return ("" if euid == 0 else "sudo ") + "apt-get install -y " + " ".join(packages(tools))


def why_not_install(path: str, euid: int, environ: dict[str, str]) -> str | None:
    """None when this process may install packages itself; else the reason it may not."""
    if environ.get("LUDIC_PREFLIGHT_INSTALL", "1") == "0":
        return "LUDIC_PREFLIGHT_INSTALL=0"
    if euid != 0:
        return "not root"
    if not shutil.which("apt-get", path=path):
        return "no apt-get on the PATH"
    return None


def message(tools: Sequence[Tool], euid: int, target: str, reason: str) -> str:
    lines = [f"preflight: `{target}` needs these system tools, and they are not installed:"]
    for pkg in packages(tools):
        of = [t for t in tools if t.package == pkg]
        lines.append(f"  {', '.join(t.name for t in of)} ({pkg}): {of[0].why}")
    lines += ["Install them all with (Debian/Ubuntu):",
              f"  {install_command(tools, euid)}",
              f"then run `{target}` again. Not installed here ({reason}); `{target}` stops here, before pytest."]
    return "\n".join(lines)


Runner = Callable[..., subprocess.CompletedProcess]


def _lists_know(pkgs: Sequence[str], path: str, run: Runner) -> bool:
    """Whether the local package lists have a candidate for every package (else apt-get update)."""
    apt_cache = shutil.which("apt-cache", path=path)
    if apt_cache is None:
        return False
    out = run([apt_cache, "policy", *pkgs], capture_output=True, text=True)
    candidates = [line.split(":", 1)[1].strip() for line in out.stdout.splitlines()
                  if line.strip().startswith("Candidate:")]
    return out.returncode == 0 and len(candidates) == len(pkgs) and "(none)" not in candidates


def install(pkgs: Sequence[str], path: str, run: Runner = subprocess.run, log=print) -> bool:
    """apt-get install -y -qq, quietly (the output only when it fails); True when it succeeded."""
    apt_get = shutil.which("apt-get", path=path)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt(*args: str) -> subprocess.CompletedProcess:
        return run([apt_get, *args], capture_output=True, text=True, env=env)

    updated = False
    if not _lists_know(pkgs, path, run):
        log("preflight: apt-get update (the package lists do not know them yet)", flush=True)
        apt("update", "-qq")
        updated = True
    res = apt("install", "-y", "-qq", *pkgs)
    if res.returncode != 0 and not updated:  # stale lists: a package moved on the mirror
        log("preflight: apt-get update (the install failed from the current lists), then again", flush=True)
        apt("update", "-qq")
        res = apt("install", "-y", "-qq", *pkgs)
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-20:])
        log(f"preflight: apt-get install failed (exit status {res.returncode}):\n{tail}", flush=True)
    return res.returncode == 0


def main(argv: Sequence[str] | None = None, *, environ: dict[str, str] | None = None, euid: int | None = None,
         run: Runner = subprocess.run, log=print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--heavy", action="store_true", help="also the tools of `make test-heavy`")
    args = parser.parse_args(argv)
    environ = dict(os.environ if environ is None else environ)
    euid = os.geteuid() if euid is None else euid
    path = environ.get("PATH", os.defpath)
    target = "make test-heavy" if args.heavy else "make test"

    missing = missing_tools(args.heavy, path, euid)
    if not missing:
        return 0
    reason = why_not_install(path, euid, environ)
    if reason is None:
        pkgs = packages(missing)
        log(f"preflight: installing {' '.join(pkgs)} for {', '.join(t.name for t in missing)} "
            f"(apt-get install -y -qq; `{target}` needs them)", flush=True)
        start = time.monotonic()
        ok = install(pkgs, path, run, log)
        missing = missing_tools(args.heavy, path, euid)
        if ok and not missing:
            log(f"preflight: installed {' '.join(pkgs)} in {time.monotonic() - start:.0f} s", flush=True)
            return 0
        reason = "apt-get install failed" if not ok else "installed, yet still not found on the PATH"
    log(message(missing, euid, target, reason), file=sys.stderr, flush=True)
    return 1


if __name__ == "__main__":
    sys.exit(main())
