"""A local `redis-server` for runs that name none (the embedded default, tests).

Redis is an existing engine, not ours: production runs name a server (a
`RedisQueue` block). For a laptop run the pipeline starts one on a free
loopback port with a fresh password and an append-only file, so a restarted
server (or a restarted run) finds its stream again.
"""

from __future__ import annotations

import secrets
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ludic_core.lifetime import with_parent
from ludic_core.ports import free_port

__all__ = ["LocalRedis"]


@dataclass
class LocalRedis:
    directory: Path
    port: int = field(default_factory=free_port)
    password: str = field(default_factory=lambda: secrets.token_urlsafe(18))
    appendonly: bool = True
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 20.0) -> LocalRedis:
        binary = shutil.which("redis-server")
        if binary is None:
            raise FileNotFoundError("redis-server is not installed (apt-get install redis-server), "
                                    "or name a running server (a RedisQueue block)")
        Path(self.directory).mkdir(parents=True, exist_ok=True)
        _stop_orphan(Path(self.directory) / "redis.pid")
        cmd = [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--requirepass", self.password,
               "--dir", str(self.directory), "--save", "", "--appendonly", "yes" if self.appendonly else "no",
               "--appendfsync", "always", "--pidfile", str(Path(self.directory).resolve() / "redis.pid")]
        self.proc = subprocess.Popen(  # SIGTERMed (it flushes its append-only file) when we die
            with_parent(cmd),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode} (port {self.port} taken?)")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise RuntimeError(f"redis-server did not listen on port {self.port} within {timeout_s:.0f} s")

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no goodbye to clients (what a crash looks like)."""
        if self.proc is not None:
            import os
            import signal

            try:  # the server itself (its guard, `self.proc`, then ends the same way)
                pid = int((Path(self.directory) / "redis.pid").read_text().strip())
                os.kill(pid, signal.SIGKILL)
            except (OSError, ValueError):
                pid = None
                self.proc.kill()  # no pidfile yet: the guard, whose death SIGKILLs the server
            self.proc.wait()
            while pid is not None and _running(pid):
                time.sleep(0.02)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None


def _stop_orphan(pidfile: Path) -> None:
    """A run killed with SIGKILL leaves its redis-server running on the same
    append-only file; two servers on one file would corrupt it. Stop the old
    one (only if the PID still runs redis-server) so the new one takes over."""
    import os
    import signal

    try:
        pid = int(pidfile.read_text().strip())
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except (OSError, ValueError):
        return
    if b"redis-server" not in cmdline:
        return
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(pid):
        time.sleep(0.05)


def _running(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "\nState:\tZ" not in status  # a zombie no one reaped has exited
