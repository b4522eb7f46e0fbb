"""In Prefect's own engine: once the process is asked to stop, a failing task is not retried.

A stop signal can surface as a task's ordinary failure (code that wraps the KeyboardInterrupt it
raised); a retry would then run the chain on past `kill PID`."""

from __future__ import annotations

import importlib
import pkgutil

import pytest
from prefect import Task, flow, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.states import Failed

import tasks
from tasks.retries import clear_stop, request_stop, retry_unless_stopping


def _retried_tasks() -> list[Task]:
    """Every task in `tasks/` that has retries: found, so a new one cannot slip past the check."""
    found = []
    for info in pkgutil.iter_modules(tasks.__path__):
        module = importlib.import_module(f"tasks.{info.name}")
        found += [t for t in vars(module).values() if isinstance(t, Task) and t.retries and t not in found]
    return found


RETRIED = _retried_tasks()


@pytest.fixture(autouse=True)
def _no_stop():
    clear_stop()
    yield
    clear_stop()


@pytest.mark.parametrize("stop", [False, True])
def test_a_task_failing_after_a_stop_runs_once(prefect_api, stop):
    calls: list[int] = []

    @task(name="fails-and-may-stop", retries=2, retry_delay_seconds=0, retry_condition_fn=retry_unless_stopping)
    def fails() -> None:
        calls.append(1)
        if stop:
            request_stop()
        raise RuntimeError("Error calling __set_name__")  # what a wrapped interrupt looks like

    @flow(name="stop-retries")
    def one() -> dict:
        state = fails(return_state=True)
        return {"failed": state.is_failed(), "id": state.state_details.task_run_id}

    outcome = one()
    assert outcome["failed"]
    with get_client(sync_client=True) as client:
        runs = client.read_task_run(outcome["id"]).run_count
    assert (len(calls), runs) == ((1, 1) if stop else (3, 3))


def test_the_six_retried_tasks_are_found():
    assert {t.name for t in RETRIED} == {"evaluate-policy", "start-vllm-server", "build-tiny-model", "actor-round",
                                         "rejection-sample", "train-stage"}


@pytest.mark.parametrize("t", RETRIED, ids=lambda t: t.name)
def test_every_retried_task_stops_retrying_on_a_stop(t):
    assert t.retry_condition_fn is not None, f"{t.name} retries without the stop check"
    failed: State = Failed(data=RuntimeError("a crash"))
    assert t.retry_condition_fn(t, None, failed)
    request_stop()
    assert not t.retry_condition_fn(t, None, failed)
