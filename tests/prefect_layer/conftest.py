"""Fixtures for the Prefect layer: the real embedded Prefect API, isolated.

`prefect_api` starts Prefect's own test harness (a real API server on SQLite in a
temporary directory) once per session, only for the tests that ask for it, with
PREFECT_HOME in a tmp dir (nothing touches ~/.prefect or the checkout's .prefect)
and analytics off. Its database starts as a copy of the run's migrated one
(tests/prefect_db.py), so the harness skips the migrations.
"""

from __future__ import annotations

import contextlib

import pytest

HARNESS_DB = "prefect-test.db"  # the file Prefect 3.8's harness opens in the directory it makes


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory, prefect_db):
    from unittest import mock

    import prefect.testing.utilities as harness
    from prefect.settings import (
        PREFECT_HOME,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        PREFECT_SERVER_DATABASE_CONNECTION_URL,
        temporary_settings,
    )

    from flows.embedded_server import patient_startup
    from tests.prefect_db import seed_home

    home = tmp_path_factory.mktemp("prefect-home")
    db_dir = seed_home(tmp_path_factory.mktemp("prefect-harness-db"), prefect_db, HARNESS_DB)
    with temporary_settings({PREFECT_HOME: str(home), PREFECT_SERVER_ANALYTICS_ENABLED: False}):
        with contextlib.ExitStack() as stack:
            # the other xdist worker may hold both cores meanwhile; the harness's temp dir is the seeded one
            with patient_startup(), mock.patch.object(harness, "mkdtemp", lambda: str(db_dir)):
                stack.enter_context(harness.prefect_test_harness(server_startup_timeout=120))
            url = PREFECT_SERVER_DATABASE_CONNECTION_URL.value()
            assert url.endswith(f"{db_dir}/{HARNESS_DB}"), f"the harness opened {url}, not the seeded copy"
            yield home
