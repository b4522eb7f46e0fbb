"""prefect.yaml deployed for real: `prefect server start`, a process work pool,
`prefect deploy --all`, a worker, and runs triggered through the API as the UI
triggers them.

Every process started here runs in its own process group and is stopped by its
PID (the group) in the fixture teardown: the server's uvicorn child and the
worker's flow-run children die with their parents.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
POOL = "ludic-process"
_BIN = Path(sys.executable).parent / "prefect"
PREFECT = [str(_BIN)] if _BIN.exists() else [sys.executable, "-m", "prefect"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _tail(path: Path, n: int = 60) -> str:
    return "\n".join(path.read_text(errors="replace").splitlines()[-n:]) if path.exists() else ""


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:  # the child keeps its own copy of the descriptor
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)


def _stop(proc: subprocess.Popen, grace_s: float = 15) -> None:
    """SIGTERM the process group (the PID leads it), wait, then SIGKILL the group."""
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            continue
        try:  # the leader is gone; children left in its group (uvicorn) go too
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        return


def _run(cmd: list[str], env: dict, timeout: float) -> str:
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
                            stdin=subprocess.DEVNULL)
    out = result.stdout + result.stderr
    assert result.returncode == 0, f"{' '.join(cmd[1:])} failed ({result.returncode}):\n{out[-4000:]}"
    return out


@pytest.fixture(scope="module")
def deployed(tmp_path_factory):
    """A server with prefect.yaml deployed on it and a worker polling the pool.
    Yields (api_url, logs dir, timings, the CLI's environment)."""
    tmp = tmp_path_factory.mktemp("prefect-deploy")
    api_url = f"http://127.0.0.1:{_free_port()}/api"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(tmp / "home"), PREFECT_API_URL=api_url,
               PREFECT_SERVER_ANALYTICS_ENABLED="false", PREFECT_SERVER_UI_ENABLED="false",
               PREFECT_WORKER_QUERY_SECONDS="1", PREFECT_CLI_COLORS="false", PYTHONUNBUFFERED="1",
               PWD=str(ROOT))  # as a shell in the project root sets it; prefect.yaml's pull step uses it
    timings: dict[str, float] = {}
    procs: list[subprocess.Popen] = []
    try:
        t0 = time.perf_counter()
        port = api_url.rsplit(":", 1)[1].split("/")[0]
        procs.append(server := _start([*PREFECT, "server", "start", "--host", "127.0.0.1", "--port", port],
                                      env, tmp / "server.log"))
        deadline = time.monotonic() + 90
        while True:
            assert server.poll() is None, f"server exited ({server.returncode}):\n{_tail(tmp / 'server.log')}"
            try:
                with urllib.request.urlopen(f"{api_url}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"server not healthy in 90 s:\n{_tail(tmp / 'server.log')}"
            time.sleep(0.5)
        timings["server healthy"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        _run([*PREFECT, "work-pool", "create", POOL, "--type", "process"], env, timeout=60)
        timings["work pool created"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        out = _run([*PREFECT, "--no-prompt", "deploy", "--all"], env, timeout=180)
        timings["deploy --all"] = time.perf_counter() - t0
        (tmp / "deploy.log").write_text(out)

        procs.append(_start([*PREFECT, "worker", "start", "--pool", POOL, "--name", "test-worker"],
                            env, tmp / "worker.log"))
        yield api_url, tmp, timings, env
    finally:
        for proc in reversed(procs):
            _stop(proc)
        print("\n[prefect deployment timings] " + json.dumps({k: round(v, 1) for k, v in timings.items()}))


@pytest.fixture
def client(deployed):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: deployed[0]}):
        with get_client(sync_client=True) as c:
            yield c


def test_prefect_yaml_deploys(client):
    import yaml

    from flows.cli import FLOWS

    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    for name in FLOWS:
        d = client.read_deployment_by_name(f"{name}/{name}")
        assert d.work_pool_name == POOL
        assert d.enforce_parameter_schema is True
        assert d.parameters == next(x for x in spec["deployments"] if x["name"] == name)["parameters"]
        # `{{ $PWD }}` is resolved by `prefect deploy` from its environment: the checkout's path.
        assert d.pull_steps == [{"prefect.deployments.steps.set_working_directory": {"directory": str(ROOT)}}]
        assert all(not s.active for s in d.schedules)
    assert {len(client.read_deployment_by_name(f"{n}/{n}").schedules) for n in ("rl_train", "evaluate")} == {1}


def test_evaluate_deployment_runs_on_the_worker(client, deployed, tiny_model_dir):
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    _, logs, timings, _ = deployed
    deployment = client.read_deployment_by_name("evaluate/evaluate")
    t0 = time.perf_counter()
    run = client.create_flow_run_from_deployment(
        deployment.id, parameters={"cfg": {"model_path": str(tiny_model_dir), "games_per_mark": 4}})
    deadline = time.monotonic() + 180
    while not (state := client.read_flow_run(run.id).state).is_final():
        assert time.monotonic() < deadline, f"flow run still {state.type.value} after 180 s:\n{_tail(logs / 'worker.log')}"
        time.sleep(1)
    timings["evaluate run: trigger -> done"] = time.perf_counter() - t0
    assert state.is_completed(), f"{state.type.value}: {state.message}\n{_tail(logs / 'worker.log')}"
    artifacts = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
    [table] = [a for a in artifacts if a.key == "evaluation"]
    rows = json.loads(table.data) if isinstance(table.data, str) else table.data
    assert [row["mark"] for row in rows] == ["X", "O"]


@pytest.mark.parametrize("cfg, field", [
    ({"model_path": "x", "games_per_mark": -1}, "cfg.games_per_mark"),
    ({"model_path": "x", "games_per_mark": 4, "temprature": 0.5}, "temprature"),
    ({"model_path": "x", "opponent": "human"}, "cfg.opponent"),
])
def test_invalid_parameters_rejected_at_trigger_time(client, cfg, field):
    from prefect.exceptions import PrefectHTTPStatusError

    deployment = client.read_deployment_by_name("evaluate/evaluate")
    with pytest.raises(PrefectHTTPStatusError) as info:
        client.create_flow_run_from_deployment(deployment.id, parameters={"cfg": cfg})
    assert info.value.response.status_code == 409
    detail = info.value.response.json()["detail"]
    assert field in detail, detail


def test_block_types_register_from_the_cli(client, deployed):
    """`prefect block register -m blocks` registers exactly Ludic's four blocks
    (the UI then offers them under Blocks -> Add)."""
    out = _run([*PREFECT, "block", "register", "-m", "blocks"], deployed[3], timeout=60)
    assert "Successfully registered 4 blocks" in out, out
    from blocks import CheckpointStore, InferenceEndpoint, RedisQueue, WandbSettings

    for cls in (CheckpointStore, InferenceEndpoint, RedisQueue, WandbSettings):
        assert client.read_block_type_by_slug(cls.get_block_type_slug()).name == cls.get_block_type_name()
