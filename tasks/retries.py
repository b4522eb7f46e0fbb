"""Retry conditions of the tasks: a failure is retried unless a retry cannot help.

A process asked to stop (`ludic`'s SIGTERM or Ctrl-C) raises KeyboardInterrupt where the signal
lands; code that wraps what it raises (a lazy import's class body turns it into
"RuntimeError: Error calling __set_name__") makes it a task's failure, and Prefect would retry
the task and run on past the stop. So the signal handler calls `request_stop`, and no task
retries after it.
"""

from __future__ import annotations

import threading
from typing import Any

__all__ = ["clear_stop", "request_stop", "retry_unless_stopping", "stop_requested"]

_stop = threading.Event()


def request_stop() -> None:
    """Mark this process as stopping: from now on no task retries."""
    _stop.set()


def stop_requested() -> bool:
    return _stop.is_set()


def clear_stop() -> None:
    """Forget a stop (a new `ludic` command in the same process: the tests call `main` in-process)."""
    _stop.clear()


def retry_unless_stopping(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect's retry condition: a failure is worth a retry unless the process is stopping."""
    return not stop_requested()
