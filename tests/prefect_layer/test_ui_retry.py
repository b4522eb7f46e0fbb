"""The Prefect UI's Retry button on a crashed training run (docs/chains.md, "Re-running a stage").

The button does not start a new run: it sends the run it is on back to Scheduled. Prefect
3.8.8's UI (the `FlowRunRetryButton` in `prefect/server/ui/assets/index-*.js`, shown on a
Completed, Cancelled, Failed or Crashed run that has a deployment) calls
`retryFlowRun(id)`, which is

    POST /api/flow_runs/{id}/set_state
    {"state": {"type": "SCHEDULED", "name": "AwaitingRetry", "message": "Retry from the UI"}, "force": false}

so the server's orchestration rules apply (`HandleFlowTerminalStateTransitions` lets a run with a
deployment leave its terminal state), a worker picks the same run up again, and its run count
goes up when it is Running again. This test sends exactly that request.

On a real server with a process worker and prefect.yaml's `chain-sft` and `chain-rl_train`
(smaller numbers, under a tmp dir): a `chain-sft` run of 4 stages is SIGKILLed in its second
stage (the flow-run process dies, the worker marks the run Crashed), then retried as the UI does.
The same run id completes, its run count is 2, the first stage is skipped, the second resumes from
the last committed checkpoint, every step is in metrics.jsonl exactly once, and the retried run's
Completed fires the chain's trigger: `chain-rl_train` runs with `upstream_run` = the retried run.
Last, the retried run's page in headless Chromium (as test_ui_browser.py), saved as
`ui-retried-run.png` (and the Automations page, `ui-automations.png`) in $LUDIC_SCREENSHOTS (docs/ has the one the docs show), else the tmp dir.
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from ludic_core.ports import free_port
from tests.procs import with_environ
from tests.prefect_layer.stack import PREFECT, ROOT, _run, _start, _stop, _tail, base_env, start_server
from tests.prefect_layer.test_chains import SMALL, shrunk

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # 92-113 s on 2 busy cores (a minute of it the runs): make test-heavy

POOL = "ludic-process"
STEPS, PER_STAGE = 40, 10  # four stages; the kill lands in the second
UI_RETRY = {"state": {"type": "SCHEDULED", "name": "AwaitingRetry", "message": "Retry from the UI"}, "force": False}


def _two_stage_chain_file(root: Path, out: Path) -> Path:
    """prefect.yaml's chain-sft and chain-rl_train (rl_train as small as test_chains.py's), under `root`."""
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    keep = []
    for d in spec["deployments"]:
        if d["name"] in ("chain-sft", "chain-rl_train"):
            keep.append(shrunk(d, SMALL["rl_train"] if d["name"] == "chain-rl_train" else {}, str(root)))
    out.write_text(yaml.safe_dump({**spec, "deployments": keep}, sort_keys=False))
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory, prefect_db):
    """A server (UI on), the two chain deployments, a worker; yields its env and the tmp dir."""
    tmp = tmp_path_factory.mktemp("prefect-retry")
    api_url = f"http://127.0.0.1:{free_port()}/api"
    env = {**base_env(api_url, tmp / "home", prefect_db), "PREFECT_SERVER_UI_ENABLED": "true"}
    procs: list[subprocess.Popen] = []
    try:
        procs.append(start_server(api_url, env, tmp / "server.log"))
        _run([*PREFECT, "work-pool", "create", POOL, "--type", "process"], env, timeout=60)
        chain_file = _two_stage_chain_file(tmp / "chains", tmp / "prefect.yaml")
        _run([*PREFECT, "--no-prompt", "deploy", "--all", "--prefect-file", str(chain_file)], env, timeout=240)
        procs.append(_start([*PREFECT, "worker", "start", "--pool", POOL, "--name", "retry-worker"], env,
                            tmp / "worker.log"))
        yield {"env": env, "tmp": tmp, "api": api_url, "chains": tmp / "chains"}
    finally:
        for proc in reversed(procs):
            _stop(proc)


def _post(api: str, path: str, body: dict) -> dict:
    req = urllib.request.Request(f"{api}{path}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.load(r)


def _latest_step(checkpoints: Path) -> int:
    from ludic_core.training.checkpoint import latest_checkpoint

    latest = latest_checkpoint(checkpoints)
    return int(latest.name.rsplit("_", 1)[-1]) if latest else 0


def _wait(client, stack, run_id, want: set[str], label: str, timeout_s: float = 300):
    deadline = time.monotonic() + timeout_s
    while (run := client.read_flow_run(run_id)).state.type.value not in want:
        assert time.monotonic() < deadline, f"{label}: {run.state.type.value} ({run.state.message}) after " \
                                            f"{timeout_s} s\n{_tail(stack['tmp'] / 'worker.log')}"
        time.sleep(0.5)
    return run


def _logged_steps(metrics: Path) -> list[int]:
    lines = metrics.read_text().splitlines() if metrics.exists() else []
    return [json.loads(line)["step"] for line in lines if line.endswith("}")]


def _kill_in_stage_two(client, stack, run_id, metrics: Path) -> int:
    """SIGKILL the flow-run process once a step of the second stage is logged (a step's checkpoint is
    committed before its metrics line), so the kill lands inside a later step; returns that step."""
    deadline = time.monotonic() + 300
    while (step := max(_logged_steps(metrics), default=0)) <= PER_STAGE:
        state = client.read_flow_run(run_id).state
        assert not state.is_final(), f"ended ({state.type.value}: {state.message}) before the kill\n" \
                                     f"{_tail(stack['tmp'] / 'worker.log')}"
        assert time.monotonic() < deadline, f"no checkpoint past step {PER_STAGE}\n{_tail(stack['tmp'] / 'worker.log')}"
        time.sleep(0.05)
    procs = with_environ(f"PREFECT__FLOW_RUN_ID={run_id}")  # the flow-run process (training runs in it)
    assert procs, "no process of the run found"
    for pid in procs:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return step


def _wait_worker_done(stack, run_id, timeout_s: float = 60) -> None:
    """Until the worker is done with the killed attempt (its `prefect.worker.executed-flow-run` event).

    Prefect 3.8.8's process worker reports a dead flow-run process as Crashed twice: its runner
    at once, then the worker itself once it has finished with the process (seconds later on a
    busy machine). A Retry pressed in between gets its new attempt marked Crashed by the second
    report; a user pressing Retry after the worker's event (on the Events page) never does."""
    body = {"filter": {"event": {"name": ["prefect.worker.executed-flow-run"]},
                       "any_resource": {"id": [f"prefect.flow-run.{run_id}"]}}, "limit": 5}
    deadline = time.monotonic() + timeout_s
    while not _post(stack["api"], "/events/filter", body)["events"]:
        assert time.monotonic() < deadline, f"no executed-flow-run event\n{_tail(stack['tmp'] / 'worker.log')}"
        time.sleep(0.5)


def _log_lines(client, run_id) -> list[str]:
    from prefect.client.schemas.filters import LogFilter, LogFilterFlowRunId

    return [log.message for log in client.read_logs(log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(
        any_=[run_id])), limit=200)]


def _stage_task_runs(client, run_id) -> list[str]:
    """The states of the run's train-stage task runs, oldest first."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run_id])))
    return [t.state.type.value for t in sorted(runs, key=lambda t: t.created) if t.name.startswith("train-stage")]


def _chain_runs(client, deployment: str, chain_id: str) -> list:
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName

    runs = client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[deployment])))
    return [r for r in runs if ((r.parameters.get("cfg") or {}).get("chain") or {}).get("id") == chain_id]


@pytest.fixture
def client(stack):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: stack["api"]}):
        with get_client(sync_client=True) as c:
            yield c


def test_ui_retry_of_a_crashed_stage_resumes_the_same_run_and_fires_the_chain(client, stack, tiny_model_dir,
                                                                              teacher_dataset):
    t_start, timings = time.perf_counter(), {}
    chain_id = f"retry-{secrets.token_hex(3)}"
    out = stack["chains"] / chain_id / "sft"
    deployment = client.read_deployment_by_name("sft/chain-sft")
    cfg = {**deployment.parameters["cfg"], "chain": {"id": chain_id}, "model_path": str(tiny_model_dir),
           "dataset_path": str(teacher_dataset), "out_dir": str(out), "steps": STEPS, "steps_per_stage": PER_STAGE,
           "batch_size": 8, "trainer": {"checkpoint_every": 1}}  # every step committed: a kill loses no logged step
    run = client.create_flow_run_from_deployment(deployment.id, parameters={"cfg": cfg})

    # the run trains; SIGKILL its process in stage 2: the worker sees it die and marks the run Crashed
    killed_at = _kill_in_stage_two(client, stack, run.id, out / "metrics.jsonl")
    timings["start -> kill"] = time.perf_counter() - t_start
    crashed = _wait(client, stack, run.id, {"CRASHED"}, "the killed run", timeout_s=120)
    assert crashed.run_count == 1 and "-9" in (crashed.state.message or ""), (crashed.run_count, crashed.state)
    committed = _latest_step(out / "checkpoints")
    assert PER_STAGE < committed < STEPS, (killed_at, committed)
    assert _chain_runs(client, "chain-rl_train", chain_id) == []  # Crashed fires no trigger
    _wait_worker_done(stack, run.id)

    # Retry, as the UI's button does: the same run back to Scheduled/AwaitingRetry, orchestrated (force false)
    t0 = time.perf_counter()
    result = _post(stack["api"], f"/flow_runs/{run.id}/set_state", UI_RETRY)
    assert result["status"] == "ACCEPT" and result["state"]["name"] == "AwaitingRetry", result
    done = _wait(client, stack, run.id, {"COMPLETED", "FAILED", "CRASHED"}, "the retried run")
    timings["retry -> Completed"] = time.perf_counter() - t0
    assert done.state.is_completed(), f"{done.state.message}\n{_tail(stack['tmp'] / 'worker.log')}"
    assert done.id == run.id and done.run_count == 2, (done.id, done.run_count)
    history = [(s.type.value, s.name) for s in client.read_flow_run_states(run.id)]
    crash = history.index(("CRASHED", "Crashed"))
    assert ("SCHEDULED", "AwaitingRetry") in history[crash:] and history[-1] == ("COMPLETED", "Completed"), history

    logs_of = lambda run_id: _log_lines(client, run_id)  # noqa: E731
    # every step trained exactly once: the retry skipped stage 1 and resumed stage 2 from the committed step
    steps = _logged_steps(out / "metrics.jsonl")
    assert steps == list(range(1, STEPS + 1)), steps
    assert _latest_step(out / "checkpoints") == STEPS
    deadline = time.monotonic() + 30
    while not any(f"resumed from {committed}," in line for line in logs_of(run.id)):
        assert time.monotonic() < deadline, "\n".join(logs_of(run.id))
        time.sleep(1)
    logs = logs_of(run.id)
    assert any(f"stage up to step {PER_STAGE} already done" in line and "skipped" in line for line in logs), logs
    stages = _stage_task_runs(client, run.id)  # stage 1 ran once (first attempt); stages 2-4 completed in the retry
    assert [state for state in stages if state == "COMPLETED"] == ["COMPLETED"] * (STEPS // PER_STAGE), stages

    # the retried run's Completed fires the chain's trigger: chain-rl_train runs from it
    t0 = time.perf_counter()
    deadline = time.monotonic() + 120
    while not (rl := _chain_runs(client, "chain-rl_train", chain_id)):
        assert time.monotonic() < deadline, f"no chain-rl_train run\n{_tail(stack['tmp'] / 'server.log')}"
        time.sleep(1)
    [rl_run] = rl
    assert rl_run.parameters["cfg"]["chain"] == {"id": chain_id, "upstream_run": str(run.id)}
    assert rl_run.parameters["cfg"]["model_path"] == str(out / "checkpoints" / f"step_{STEPS:08d}" / "model")
    assert rl_run.created_by is not None and rl_run.created_by.type == "AUTOMATION"
    rl_done = _wait(client, stack, rl_run.id, {"COMPLETED", "FAILED", "CRASHED"}, "chain-rl_train")
    assert rl_done.state.is_completed(), rl_done.state.message  # its upstream check accepts the retried run
    timings["Completed -> rl_train Completed"] = time.perf_counter() - t0

    _screenshot(stack, str(run.id))
    timings["total"] = time.perf_counter() - t_start
    print(f"\n[ui retry] killed at step {killed_at} (committed {committed}); history {history}; stages {stages}; "
          f"timings {json.dumps({k: round(v, 1) for k, v in timings.items()})}")


def _screenshot(stack, run_id: str) -> None:
    """The retried run's page in headless Chromium: Completed, run count 2, the Retry control."""
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.prefect_layer.test_ui_browser import _binary

    options = Options()
    options.binary_location = _binary("chromium", "chromium-browser", "google-chrome")
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(arg)
    shots = Path(os.environ.get("LUDIC_SCREENSHOTS") or stack["tmp"] / "screenshots")
    shots.mkdir(parents=True, exist_ok=True)
    browser = webdriver.Chrome(service=Service(_binary("chromedriver")), options=options)
    try:
        browser.get(f"{stack['api'].removesuffix('/api')}/runs/flow-run/{run_id}")
        text = lambda b: b.find_element(By.TAG_NAME, "body").text  # noqa: E731
        WebDriverWait(browser, 60, poll_frequency=0.3).until(lambda b: "Run Count" in text(b) or
                                                             b.find_elements(By.CSS_SELECTOR, "li.p-tab#details"))
        tabs = browser.find_elements(By.CSS_SELECTOR, "li.p-tab#details")
        if tabs and "Run Count" not in text(browser):
            browser.execute_script("arguments[0].click()", tabs[0])
        WebDriverWait(browser, 30, poll_frequency=0.3).until(lambda b: "Run Count" in text(b))
        body = text(browser)
        assert "Completed" in body and "Run Count\n2" in body, body[:3000]
        browser.save_screenshot(str(shots / "ui-retried-run.png"))
        # the Automations page: the trigger prefect.yaml gave chain-rl_train, made an automation by deploy
        browser.get(f"{stack['api'].removesuffix('/api')}/automations")
        WebDriverWait(browser, 60, poll_frequency=0.3).until(lambda b: "ludic chain:" in text(b))
        assert "ludic chain: chain-sft -> chain-rl_train" in text(browser), text(browser)[:3000]
        browser.save_screenshot(str(shots / "ui-automations.png"))
    finally:
        browser.quit()
