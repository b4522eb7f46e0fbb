"""A real redis-server per test, on a free loopback port, with a password.

No mock: the stream semantics under test (pending entries, XAUTOCLAIM, group
lag, MINID trimming, a server restart) are Redis's own. CI installs the binary
(`.ci/run`); a missing binary fails these tests instead of skipping them.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

PASSWORD = "s3cret-test-pw"


@dataclass
class RedisServer:
    port: int
    directory: Path
    appendonly: bool
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary, "redis-server is not installed (.ci/run installs it: apt-get install redis-server)"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--requirepass", PASSWORD,
             "--dir", str(self.directory), "--save", "", "--appendonly", "yes" if self.appendonly else "no",
             "--appendfsync", "always"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        raise RuntimeError(f"redis-server did not listen on {self.port}")

    def kill(self) -> None:
        """SIGKILL: no shutdown save, no goodbye to clients."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def redis_server(tmp_path):
    server = RedisServer(_free_port(), tmp_path, appendonly=True)
    server.start()
    yield server
    server.kill()


@pytest.fixture
def client(redis_server):
    from ludic_core.queue import connect

    c = connect(redis_server.url, password=PASSWORD, retries=10)
    yield c
    c.close()
