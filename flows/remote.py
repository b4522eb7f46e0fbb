"""Trigger a deployment and follow its run from a terminal, ending with why it failed.

`prefect deployment run NAME --watch` ends with "Flow run finished in state
'Failed'". The reason (the flow's exception, e.g. a missing model directory and
the command that builds it) is in the run's state message and its logs, and
Prefect's watcher prints the logs only when the server streams them
(`prefect.toml` turns that on for a server started in the checkout).

`ludic run FLOW --deployment` and `ludic watch RUN` read both through the REST
API, so they need nothing from the server's settings: they print the run's log
lines as they arrive and end with its final state and message. Their exit code
is 0 only for a Completed run.
"""

from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Any, Callable
from uuid import UUID

__all__ = ["trigger", "find_run", "follow", "outcome"]

POLL_S = 1.0
#: logs reach the API in batches (Prefect's log worker flushes every ~2 s): wait for stragglers
SETTLE_S = 4.0
#: how far back each poll looks for logs that arrived late (deduplicated by id)
LOOKBACK = timedelta(seconds=60)


def _client():
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL

    if not PREFECT_API_URL.value():
        raise ValueError("no Prefect server: set PREFECT_API_URL (e.g. http://127.0.0.1:4200/api) to the server "
                         "the deployments live on")
    return get_client(sync_client=True)


def trigger(deployment: str, cfg: dict[str, Any] | None) -> tuple[UUID, str]:
    """Start a run of `deployment` ("flow/name") with `cfg` as its whole `cfg` parameter
    (None: the deployment's own); (run id, run name). A value the server refuses is a
    ValueError naming the field."""
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError

    with _client() as client:
        try:
            d = client.read_deployment_by_name(deployment)
        except ObjectNotFound:
            raise ValueError(f"no deployment {deployment!r} on this server; create it with "
                             "`prefect --no-prompt deploy --all` in the checkout") from None
        try:
            run = client.create_flow_run_from_deployment(d.id, parameters=None if cfg is None else {"cfg": cfg})
        except PrefectHTTPStatusError as exc:
            raise ValueError(f"{deployment}: the server refused the parameters: "
                             f"{exc.response.json().get('detail', exc)}") from None
    return run.id, run.name


def find_run(ref: str) -> UUID:
    """A flow run by id or by name (as `prefect deployment run` prints both)."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterName

    try:
        return UUID(ref)
    except ValueError:
        pass
    with _client() as client:
        runs = client.read_flow_runs(flow_run_filter=FlowRunFilter(name=FlowRunFilterName(any_=[ref])), limit=2)
    if len(runs) != 1:
        raise ValueError(f"{'no' if not runs else 'more than one'} flow run named {ref!r}; give its id")
    return runs[0].id


def _print_log(log: Any) -> None:
    level = {10: "DEBUG", 20: "INFO", 30: "WARNING", 40: "ERROR", 50: "CRITICAL"}.get(log.level, str(log.level))
    print(f"{log.timestamp:%H:%M:%S} {level:<7} {log.message}", flush=True)


def _new_logs(client: Any, run_id: UUID, since: Any, seen: set[UUID]) -> list[Any]:
    """Logs of the run not yet seen, oldest first, from `LOOKBACK` before the newest seen on."""
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId, LogFilterTimestamp
    from prefect.client.schemas.sorting import LogSort

    window = LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run_id]),
                       timestamp=LogFilterTimestamp(after_=since - LOOKBACK) if since else None)
    fresh, offset, page = [], 0, 200
    while True:
        logs = client.read_logs(log_filter=window, sort=LogSort.TIMESTAMP_ASC, limit=page, offset=offset)
        fresh += [log for log in logs if log.id not in seen]
        if len(logs) < page:
            return fresh
        offset += page


def follow(run_id: UUID, on_log: Callable[[Any], None] = _print_log) -> Any:
    """Print the run's state changes and log lines until it is final and its last
    logs have arrived; returns the flow run (with its final state)."""
    seen: set[UUID] = set()
    last_state, since, quiet_since = None, None, None
    with _client() as client:
        while True:
            run = client.read_flow_run(run_id)
            if run.state and run.state.name != last_state:
                last_state = run.state.name
                print(f"-- {run.name}: {last_state}", flush=True)
            fresh = _new_logs(client, run_id, since, seen)
            for log in fresh:
                seen.add(log.id)
                since = max(since or log.timestamp, log.timestamp)
                on_log(log)
            if run.state and run.state.is_final():
                quiet_since = time.monotonic() if fresh or quiet_since is None else quiet_since
                if time.monotonic() - quiet_since >= SETTLE_S:
                    return run
            time.sleep(POLL_S)


def outcome(run: Any, deployment: str | None = None) -> int:
    """Print how the run ended (the state's message is the flow's exception); 0 for Completed."""
    where = f" ({deployment})" if deployment else ""
    state = run.state
    if state is not None and state.is_completed():
        print(f"flow run {run.name!r}{where} Completed", flush=True)
        return 0
    name = state.name if state else "unknown"
    message = (state.message if state else None) or "no message; see the logs above or the worker's log"
    print(f"ludic: error: flow run {run.name!r}{where} finished {name}: {message}", file=sys.stderr, flush=True)
    return 1
