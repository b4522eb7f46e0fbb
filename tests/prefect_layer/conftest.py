"""Fixtures for the Prefect layer: the real embedded Prefect API, isolated.

`prefect_api` starts Prefect's own test harness (a real API server on SQLite in a
temporary directory) once per session, only for the tests that ask for it, with
PREFECT_HOME in a tmp dir (nothing touches ~/.prefect or the checkout's .prefect)
and analytics off.
"""

from __future__ import annotations

import contextlib

import pytest


@pytest.fixture(scope="session")
def prefect_api(tmp_path_factory):
    from prefect.settings import (
        PREFECT_HOME,
        PREFECT_SERVER_ANALYTICS_ENABLED,
        temporary_settings,
    )
    from prefect.testing.utilities import prefect_test_harness

    from flows.embedded_server import patient_startup

    home = tmp_path_factory.mktemp("prefect-home")
    with temporary_settings({PREFECT_HOME: str(home), PREFECT_SERVER_ANALYTICS_ENABLED: False}):
        with contextlib.ExitStack() as stack:
            with patient_startup():  # the other xdist worker may hold both cores meanwhile
                stack.enter_context(prefect_test_harness(server_startup_timeout=120))
            yield home
