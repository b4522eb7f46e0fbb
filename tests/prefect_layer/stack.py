"""Real Prefect processes for the deployment tests: a server, a process work
pool, `prefect deploy --all`, workers. Every process runs in its own process
group and is stopped by it (the server's uvicorn child and a worker's flow-run
children go with their leader)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

from tests.prefect_db import PREFECT, seed_home

ROOT = Path(__file__).resolve().parents[2]


def _tail(path: Path, n: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM the process group (the PID leads it), wait, then SIGKILL the group."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; children left in its group (uvicorn) go too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def _run(cmd: list[str], env: dict, timeout: float) -> str:
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    out = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(cmd[1:])} failed ({result.returncode}):\n{out[-4000:]}"
    return out



def start_server(api_url: str, env: dict, log: Path, timeout_s: float = 90) -> subprocess.Popen:
    """`prefect server start` on `api_url`'s port; returns once /health answers."""
    port = api_url.rsplit(":", 1)[1].split("/")[0]
    server = _start([*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", port], env, log)
    deadline = time.monotonic() + timeout_s
    while True:
        assert server.poll() is None, f"server exited ({server.returncode}):\n{_tail(log)}"
        try:
            with urllib.request.urlopen(f"{api_url}/health", timeout=2) as r:
                if r.status == 200:
                    return server
        except OSError:
            pass
        assert time.monotonic() < deadline, f"server not healthy in {timeout_s:.0f} s:\n{_tail(log)}"
        time.sleep(0.5)


def base_env(api_url: str, home: Path, db: Path | None = None) -> dict:
    """The CLI's environment: this API, a private PREFECT_HOME, a shell's PWD in the project root.
    `db` (the `prefect_db` fixture) is copied into the home first, so that a SQLite server
    started there skips the migrations (tests/prefect_db.py)."""
    if db is not None:
        seed_home(home, db)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_API_URL=api_url,
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_UI_ENABLED="false",
               PREFECT_WORKER_QUERY_SECONDS="1", PREFECT_CLI_COLORS="false", PYTHONUNBUFFERED="1",
               PWD=str(ROOT))  # as a shell in the project root sets it; prefect.yaml's pull step uses it
    return env
