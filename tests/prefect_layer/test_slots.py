"""Two runs on one concurrency-limited slot (a Prefect global concurrency
limit of 1, as for one GPU): the second waits, then runs; their evaluation
tasks never overlap. A slot that does not exist is an error naming it."""

import threading

import pytest

pytestmark = pytest.mark.slow


def _task_span(client, flow_run_id, name: str):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id])))
    [run] = [r for r in runs if r.name.startswith(name)]
    return run.start_time, run.end_time


def test_two_runs_on_one_slot_take_turns(prefect_api, tiny_model_dir):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

    from flows.evaluate import EvaluateConfig, evaluate
    from ludic_core.compose.policy import ModelPolicy
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV

    with get_client(sync_client=True) as client:
        client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name="test-gpu", limit=1))
    cfg = EvaluateConfig(policy=ModelPolicy(model_path=str(tiny_model_dir)), env=ENV, agent=AGENT, episodes=1500,
                         slot="test-gpu")
    states: list = []
    threads = [threading.Thread(target=lambda: states.append(evaluate(cfg, return_state=True))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert len(states) == 2 and all(s.is_completed() for s in states)
    with get_client(sync_client=True) as client:
        spans = sorted(_task_span(client, s.state_details.flow_run_id, "evaluate-policy") for s in states)
    (start1, end1), (start2, end2) = spans
    assert end1 <= start2, f"the runs overlapped on one slot: {spans}"


def test_a_missing_slot_is_named(prefect_api, tiny_model_dir):
    from flows.evaluate import EvaluateConfig, evaluate
    from ludic_core.compose.policy import ModelPolicy
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV

    cfg = EvaluateConfig(policy=ModelPolicy(model_path=str(tiny_model_dir)), env=ENV, agent=AGENT, episodes=2,
                         slot="no-such-gpu")
    with pytest.raises(RuntimeError, match="slot 'no-such-gpu'.*prefect gcl create no-such-gpu --limit 1"):
        evaluate(cfg)
