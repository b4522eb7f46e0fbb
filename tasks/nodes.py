"""The other machines of a multi-node torchrun stage, as Prefect flow runs.

The head's `train_stage` triggers one `train_node` run per other node (each
deployment on that machine's work pool), runs its own agent, then waits for
theirs. A failed or cancelled head cancels them, so a retry starts every node
afresh instead of leaving agents waiting at a rendezvous nobody joins.
"""

from __future__ import annotations

import time
from uuid import UUID

from ludic_core.stages.spec import StageSpec

__all__ = ["start_nodes", "wait_nodes", "cancel_nodes"]


def start_nodes(spec: StageSpec, nproc: int) -> list[UUID]:
    """Trigger `spec.nodes.node_deployments`, each with this stage's spec; returns their run ids."""
    from prefect.deployments import run_deployment

    params = {"cfg": {"spec": spec.model_dump(mode="json"), "nproc": nproc}}
    return [run_deployment(name, parameters=params, timeout=0, as_subflow=True,
                           flow_run_name=f"node {i + 1} to step {spec.until_step}").id
            for i, name in enumerate(spec.nodes.node_deployments)]


def wait_nodes(ids: list[UUID], timeout_s: float, poll_s: float = 2.0) -> None:
    """Block until every node run is final; raise naming the ones that did not complete."""
    from prefect.client.orchestration import get_client

    deadline = time.monotonic() + timeout_s
    with get_client(sync_client=True) as client:
        pending = list(ids)
        failed: list[str] = []
        while pending:
            for run_id in list(pending):
                run = client.read_flow_run(run_id)
                if run.state is not None and run.state.is_final():
                    pending.remove(run_id)
                    if not run.state.is_completed():
                        failed.append(f"{run.name} ({run_id}): {run.state.name}")
            if pending and time.monotonic() > deadline:
                raise TimeoutError(f"node runs not finished after {timeout_s:.0f} s: {pending}")
            if pending:
                time.sleep(poll_s)
    if failed:
        raise RuntimeError("node runs did not complete: " + "; ".join(failed))


def cancel_nodes(ids: list[UUID]) -> None:
    """Ask the workers to cancel the node runs that are not final yet (best effort)."""
    from prefect.client.orchestration import get_client
    from prefect.states import Cancelling

    with get_client(sync_client=True) as client:
        for run_id in ids:
            try:
                run = client.read_flow_run(run_id)
                if run.state is None or not run.state.is_final():
                    client.set_flow_run_state(run_id, Cancelling(message="the head node's stage stopped"), force=True)
            except Exception:  # the head's own error is the one to report
                pass
