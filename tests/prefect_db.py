"""A migrated Prefect database for the tests that start Prefect in a fresh PREFECT_HOME.

A Prefect server on a new SQLite file first runs every migration: 13-19 s of a 2-core host's
time, paid again by each test that starts a server or a flow's temporary server in a home of its
own. The `prefect_db` fixture (tests/conftest.py) runs them once per test run, under pytest's base
temp dir (one xdist worker makes it while the others wait on a lock), and `seed_home` copies the
file into a home before its server starts: the server then only checks the schema, as on a user's
second run. Block types are still registered at start (Prefect's memo of that is keyed by the
database's path). Migrating an empty database stays tested: the demo chain's test
(tests/test_cli.py) and Prefect's test harness (tests/prefect_layer/conftest.py) start on one.
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


def migrated_db(root: Path) -> Path:
    """`root/prefect-migrated/prefect.db`, every migration applied (made on the first call)."""
    from filelock import FileLock

    db = root / "prefect-migrated" / DB_FILE
    with FileLock(str(root / "prefect-migrated.lock")):
        if not db.exists():
            part = root / f"prefect-migrating-{os.getpid()}"
            env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
            env.update(PREFECT_HOME=str(part), PREFECT_SERVER_ANALYTICS_ENABLED="false")
            res = subprocess.run([*PREFECT, "server", "database", "upgrade", "-y"], env=env, capture_output=True,
                                 text=True, timeout=600, stdin=subprocess.DEVNULL)
            assert res.returncode == 0 and (part / DB_FILE).exists(), \
                f"prefect server database upgrade failed ({res.returncode}):\n{(res.stdout + res.stderr)[-3000:]}"
            os.replace(part, db.parent)
    return db


def seed_home(home: Path, db: Path) -> Path:
    """`home` (made if missing) holding a copy of the migrated database `db`."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(db, home / DB_FILE)
    return home
