"""A throwaway PostgreSQL server for tests: `initdb` + `pg_ctl` into a temp dir
on a free loopback port (the binaries are on this machine kind). As root the
server runs as the `postgres` user, which PostgreSQL requires."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def _bin(name: str) -> str:
    found = shutil.which(name) or next(iter(sorted(Path("/usr/lib/postgresql").glob(f"*/bin/{name}"))), None)
    if found is None:
        raise FileNotFoundError(f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql)")
    return str(found)


class PostgresServer:
    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.dir = Path(tempfile.mkdtemp(prefix="ludic-pg-"))
        self.data = self.dir / "data"
        self._as = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self._as:
            shutil.chown(self.dir, "postgres", "postgres")

    def _run(self, *cmd: str) -> None:
        out = subprocess.run([*self._as, *cmd], capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")

    def start(self) -> PostgresServer:
        self._run(_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8")
        self._run(_bin("pg_ctl"), "-D", str(self.data), "-l", str(self.dir / "server.log"), "-w", "start",
                  "-o", f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1")
        self._run(_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "prefect")
        return self

    @property
    def url(self) -> str:
        """What PREFECT_API_DATABASE_CONNECTION_URL takes."""
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/prefect"

    def stop(self) -> None:
        try:
            self._run(_bin("pg_ctl"), "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
