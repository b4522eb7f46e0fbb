"""The head's bookkeeping of a multi-node stage's other machines (tasks/nodes.py),
against the real Prefect API: it waits for their runs, names the ones that did
not complete, and cancels the ones still going when its own stage failed."""

from __future__ import annotations

import pytest

from tasks.nodes import cancel_nodes, wait_nodes


@pytest.fixture
def runs(prefect_api):
    """Make flow runs of a throwaway flow in a given state: runs(state) -> id."""
    from prefect import flow
    from prefect.client.orchestration import get_client

    @flow(name="node-stand-in")
    def stand_in():
        pass

    with get_client(sync_client=True) as client:
        def make(state):
            run = client.create_flow_run(stand_in, state=state)
            return run.id

        make.client = client
        yield make


def test_completed_nodes_pass_and_failed_ones_are_named(runs):
    from prefect.states import Completed, Crashed, Running

    done, crashed = runs(Completed()), runs(Crashed(message="agent died"))
    wait_nodes([done], timeout_s=10)
    with pytest.raises(RuntimeError, match=f"{crashed}\\): Crashed"):
        wait_nodes([done, crashed], timeout_s=10)
    going = runs(Running())
    with pytest.raises(TimeoutError, match=str(going)):
        wait_nodes([done, going], timeout_s=1, poll_s=0.2)


def test_a_failed_head_cancels_the_nodes_still_going(runs):
    from prefect.states import Completed, Running

    going, done = runs(Running()), runs(Completed())
    cancel_nodes([going, done])
    assert runs.client.read_flow_run(going).state.type.value == "CANCELLING"
    assert runs.client.read_flow_run(done).state.type.value == "COMPLETED"  # a final state is left alone
