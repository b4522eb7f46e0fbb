"""Prefect's embedded server starts on a machine too busy to answer its first health check at once."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time

import pytest

pytestmark = pytest.mark.slow

FREEZE_S = 8.0  # past the 5 s read timeout Prefect's startup poll has of its own


def _start_through_a_freeze(tmp_path, db) -> tuple[float | None, Exception | None]:
    """Start a real embedded server and stop its process for FREEZE_S the moment it listens ->
    (seconds `start` took, or None where it had finished before the freeze; what it raised)."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_HOME, PREFECT_SERVER_DATABASE_CONNECTION_URL, temporary_settings

    from flows.embedded_server import patient_startup
    from ludic_core.ports import free_port
    from tests.prefect_db import seed_home

    # migrated already (tests/prefect_db.py): the start is what is tested
    home = seed_home(tmp_path / f"home-{time.monotonic_ns()}", db, "p.db")
    # its own home and database, not a harness's that this worker may be running
    isolated = {PREFECT_HOME: str(home), PREFECT_SERVER_DATABASE_CONNECTION_URL: f"sqlite+aiosqlite:///{home}/p.db"}
    server = SubprocessASGIServer(port=free_port())
    outcome: dict = {}

    def start() -> None:
        began = time.monotonic()
        try:
            with temporary_settings(isolated), patient_startup():
                server.start(timeout=120)
        except Exception as exc:  # noqa: BLE001 - handed to the test
            outcome["error"] = exc
        outcome["seconds"] = time.monotonic() - began

    thread = threading.Thread(target=start)
    thread.start()
    try:
        while server.server_process is None:
            time.sleep(0.001)
        while not _listens(server.port):
            assert server.server_process.poll() is None, "the server exited while starting"
        if not thread.is_alive():  # its poll got an answer before the freeze: nothing was tested
            return None, outcome.get("error")
        os.kill(server.server_process.pid, signal.SIGSTOP)
        time.sleep(FREEZE_S)
        os.kill(server.server_process.pid, signal.SIGCONT)
        thread.join(timeout=120)
    finally:
        server.stop()
    return outcome.get("seconds"), outcome.get("error")


def _listens(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.05).close()
        return True
    except OSError:
        return False


def test_a_server_that_listens_before_it_answers_still_starts(tmp_path, prefect_db):
    """Without `patient_startup`, Prefect 3.8's `start` raises httpx.ReadTimeout here."""
    for _ in range(3):  # the freeze must land while `start` still polls; it nearly always does
        seconds, error = _start_through_a_freeze(tmp_path, prefect_db)
        assert error is None, f"start failed: {type(error).__name__}: {error}"
        if seconds is not None and seconds >= FREEZE_S:
            return  # it waited through the freeze and started
    pytest.fail("the freeze never caught the startup poll in 3 tries")
