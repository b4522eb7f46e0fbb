"""In Prefect's own engine: once the process is asked to stop, a failing task is not retried.

A stop signal can surface as a task's ordinary failure (code that wraps the KeyboardInterrupt it
raised); a retry would then run the chain on past `kill PID`."""

from __future__ import annotations

import importlib

import pytest
from prefect import flow, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.objects import State
from prefect.states import Failed

from tasks.retries import clear_stop, request_stop, retry_unless_stopping

TASKS = [("tasks.evaluation", "evaluate_policy"), ("tasks.inference", "start_server"),
         ("tasks.models", "build_model"), ("tasks.pipeline", "actor_round_task"),
         ("tasks.rollouts", "rejection_sample"), ("tasks.training", "train_stage")]


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


@pytest.mark.parametrize("module,name", TASKS)
def test_every_retried_task_stops_retrying_on_a_stop(module, name):
    t = getattr(importlib.import_module(module), name)
    assert t.retries and t.retry_condition_fn is not None, f"{name} retries without the stop check"
    failed: State = Failed(data=RuntimeError("a crash"))
    assert t.retry_condition_fn(t, None, failed)
    request_stop()
    assert not t.retry_condition_fn(t, None, failed)
