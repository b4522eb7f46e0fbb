"""A migrated Prefect database for the tests that start Prefect in a fresh PREFECT_HOME.

A Prefect server on a new SQLite file first runs every migration: 13-19 s of a 2-core host's
time, paid again by each test that starts a server, a flow's temporary server or Prefect's test
harness on a database of its own. The `prefect_db` fixture (tests/conftest.py) runs them once per
test run, and `seed_home` copies the file into a home before its server starts: the server then
only checks the schema, as on a user's second run (`prefect server start` healthy in 9.0 s
against 22.6 s on an Intel Xeon of model 207). Block types are still registered at each start
(Prefect's memo of that is keyed by the database's path). Migrating an empty database stays
tested: the demo chain's test (tests/test_cli.py) starts on one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

_BIN = Path(sys.executable).parent / "prefect"
PREFECT = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "prefect"]
DB_FILE = "prefect.db"  # where Prefect's default connection URL puts SQLite under PREFECT_HOME


def migrate(home: Path) -> Path:
    """`home/prefect.db` with every migration applied (`prefect server database upgrade`)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false")
    res = subprocess.run([*PREFECT, "server", "database", "upgrade", "-y"], env=env, capture_output=True, text=True,
                         timeout=600, stdin=subprocess.DEVNULL)
    assert res.returncode == 0 and (home / DB_FILE).exists(), \
        f"prefect server database upgrade failed ({res.returncode}):\n{(res.stdout + res.stderr)[-3000:]}"
    return home / DB_FILE


def seed_home(home: Path, db: Path, name: str = DB_FILE) -> Path:
    """`home` (made if missing) holding a copy of the migrated database `db` as `name`."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(db, home / name)
    return home
