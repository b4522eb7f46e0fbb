"""Starting Prefect's embedded API server on a busy machine.

Prefect's `SubprocessASGIServer.start` polls the new server's /health with httpx's default
5 s read timeout and retries refused connections only. A server that already listens but does
not answer yet (its services starting while another job holds the cores: a vLLM server
loading, a training stage) makes `start` raise `ReadTimeout`, and the run fails before its
first task; a CI run once lost four tests to it. `patient_startup` gives that poll a
longer read timeout while a server starts.
"""

from __future__ import annotations

import contextlib
import functools
from types import SimpleNamespace
from typing import Iterator

__all__ = ["HEALTH_READ_TIMEOUT_S", "patient_startup"]

#: Seconds one /health request of the startup poll may wait for an answer (httpx's default: 5).
HEALTH_READ_TIMEOUT_S = 60.0


@contextlib.contextmanager
def patient_startup(read_timeout: float = HEALTH_READ_TIMEOUT_S) -> Iterator[None]:
    """While the block runs, Prefect's server startup poll waits `read_timeout` s for each answer."""
    import httpx
    from prefect.server.api import server

    real = server.httpx  # the module uses httpx for this poll only (Prefect 3.8)
    server.httpx = SimpleNamespace(Client=functools.partial(httpx.Client, timeout=read_timeout),
                                   ConnectError=httpx.ConnectError)
    try:
        yield
    finally:
        server.httpx = real
