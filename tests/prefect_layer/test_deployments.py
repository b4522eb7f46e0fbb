"""prefect.yaml deployed for real: `prefect server start`, a process work pool,
`prefect deploy --all`, a worker, and runs triggered through the API as the UI
triggers them.

The worker's PYTHONPATH also holds a folder outside the project
(`USER_PACKAGES` under the fixture's tmp dir): the acceptance test puts a
user's own env package there, which only the worker ever imports.

Every process started here runs in its own process group and is stopped by its
PID (the group) in the fixture teardown: the server's uvicorn child and the
worker's flow-run children die with their parents.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from ludic_core.ports import free_port

pytestmark = [pytest.mark.slow, pytest.mark.first]  # one module-scoped stack: 2-7 min

from tests.prefect_layer.stack import PREFECT, ROOT, _run, _start, _stop, _tail, base_env, start_server

POOL = "ludic-process"
# The heavy tests the PostgreSQL stack leaves to SQLite: what they add (a CLI that watches a
# run, two torchrun nodes) does not touch the database beyond what the chain test does there.
SQLITE_ONLY = pytest.mark.parametrize("deployed", ["sqlite"], indirect=True, scope="module")
USER_PACKAGES = "user-packages"  # under the `deployed` tmp dir; on the worker's PYTHONPATH only


@pytest.fixture(scope="module", params=["sqlite", pytest.param("postgresql", marks=pytest.mark.heavy)])
def deployed(request, tmp_path_factory, prefect_db):
    """A server with prefect.yaml deployed on it and a worker polling the pool,
    on SQLite (Prefect's default) and on a PostgreSQL server the fixture starts.
    Yields (api_url, logs dir, timings, the CLI's environment). The worker's
    environment adds `logs dir / USER_PACKAGES` to PYTHONPATH (nothing else does)."""
    tmp = tmp_path_factory.mktemp(f"prefect-deploy-{request.param}")
    api_url = f"http://127.0.0.1:{free_port()}/api"
    env = base_env(api_url, tmp / "home", prefect_db if request.param == "sqlite" else None)
    auth = f"ludic:{secrets.token_urlsafe(16)}"  # Prefect's own basic auth: the server's, and every client's
    env.update(PREFECT_SERVER_API_AUTH_STRING=auth, PREFECT_API_AUTH_STRING=auth)
    timings: dict[str, float] = {}
    procs: list[subprocess.Popen] = []
    database = None
    try:
        if request.param == "postgresql":
            from tests.prefect_layer.postgres import PostgresServer

            t0 = time.perf_counter()
            database = PostgresServer().start()
            env["PREFECT_API_DATABASE_CONNECTION_URL"] = database.url  # the server's only; clients use the API
            timings["postgresql started"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        procs.append(start_server(api_url, env, tmp / "server.log"))
        timings["server healthy"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        _run([*PREFECT, "work-pool", "create", POOL, "--type", "process"], env, timeout=60)
        timings["work pool created"] = time.perf_counter() - t0

        t0 = time.perf_counter()
        out = _run([*PREFECT, "--no-prompt", "deploy", "--all"], env, timeout=180)
        timings["deploy --all"] = time.perf_counter() - t0
        (tmp / "deploy.log").write_text(out)

        (user_packages := tmp / USER_PACKAGES).mkdir()
        worker_env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (str(user_packages), env.get("PYTHONPATH"))
                                                           if p)}
        procs.append(_start([*PREFECT, "worker", "start", "--pool", POOL, "--name", "test-worker"],
                            worker_env, tmp / "worker.log"))
        yield api_url, tmp, timings, env
    finally:
        for proc in reversed(procs):
            _stop(proc)
        if database is not None:
            database.stop()
        print(f"\n[prefect deployment timings, {request.param}] "
              + json.dumps({k: round(v, 1) for k, v in timings.items()}))


@pytest.fixture
def client(deployed):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_AUTH_STRING, PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: deployed[0],
                             PREFECT_API_AUTH_STRING: deployed[3]["PREFECT_API_AUTH_STRING"]}):
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


def _trigger(client, name: str, cfg: dict):
    """Trigger deployment `name/name` with `cfg` as the UI's Run button does; (flow run, t0)."""
    deployment = client.read_deployment_by_name(f"{name}/{name}")
    return client.create_flow_run_from_deployment(deployment.id, parameters={"cfg": cfg}), time.perf_counter()


def _run_deployment(client, deployed, name: str, cfg: dict, *, label: str | None = None, timeout_s: float = 180):
    """Trigger, wait until the run is final; (flow run, its COMPLETED state)."""
    run, t0 = _trigger(client, name, cfg)
    return run, _wait(client, deployed, run, label or name, t0, timeout_s)


def _wait(client, deployed, run, label: str, t0: float, timeout_s: float = 180):
    _, logs, timings, _ = deployed
    deadline = time.monotonic() + timeout_s
    while not (state := client.read_flow_run(run.id).state).is_final():
        assert time.monotonic() < deadline, \
            f"{label} run still {state.type.value} after {timeout_s} s:\n{_tail(logs / 'worker.log')}"
        time.sleep(1)
    timings[f"{label} run: trigger -> done"] = time.perf_counter() - t0
    assert state.is_completed(), f"{label}: {state.type.value}: {state.message}\n{_tail(logs / 'worker.log')}"
    return state


def _table(client, run, key: str) -> list[dict]:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    artifacts = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
    [table] = [a for a in artifacts if a.key == key]
    return json.loads(table.data) if isinstance(table.data, str) else table.data


def _metrics(client, run) -> dict[str, float]:
    """The evaluate flow's result, as its "evaluation" table artifact shows it."""
    rows = _table(client, run, "evaluation")
    assert rows and all(set(row) == {"metric", "value"} for row in rows), rows
    return {row["metric"]: row["value"] for row in rows}


GENERIC_METRICS = {"episodes", "mean_return", "success_rate", "pass@1", "parse_error_rate", "mean_turns",
                   "mean_completion_tokens"}


def test_evaluate_deployment_runs_on_the_worker(client, deployed, tiny_model_dir):
    """An evaluate run on the worker: its metrics table (generic and the env's own), and the
    server really keeps its state where it was told: PostgreSQL's `flow_run` table (read
    with psql), or SQLite's file under PREFECT_HOME."""
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV

    cfg = {"policy": {"kind": "model", "model_path": str(tiny_model_dir)}, "env": ENV.model_dump(mode="json"),
           "agent": AGENT.model_dump(mode="json"), "episodes": 4}
    run, _ = _run_deployment(client, deployed, "evaluate", cfg)
    metrics = _metrics(client, run)
    assert GENERIC_METRICS <= set(metrics), sorted(metrics)
    assert metrics["episodes"] == 4
    # the env's own table: agent_mark "alternate" plays even seeds as X and odd ones as O
    for mark in ("X", "O"):
        assert {f"{mark}/legal_move_rate", f"{mark}/win_draw_rate"} <= set(metrics), sorted(metrics)
    assert all(isinstance(v, (int, float)) for v in metrics.values()), metrics
    env = deployed[3]
    url = env.get("PREFECT_API_DATABASE_CONNECTION_URL")
    query = f"select state_type from flow_run where id = '{run.id}'"
    if url:
        host_port = url.split("@", 1)[1].split("/", 1)[0]
        host, port = host_port.split(":")
        out = subprocess.run(["psql", "-h", host, "-p", port, "-U", "postgres", "-d", "prefect", "-tAc", query],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        assert out.stdout.strip() == "COMPLETED"
    else:
        import sqlite3

        with sqlite3.connect(Path(env["PREFECT_HOME"]) / "prefect.db") as db:
            assert db.execute(query).fetchone() == ("COMPLETED",)


_VALID = {"policy": {"kind": "model", "model_path": "x"}, "env": {"name": "tic_tac_toe"}}


@pytest.mark.parametrize("cfg, field", [
    ({**_VALID, "episodes": -1}, "cfg.episodes"),                          # out of range
    ({**_VALID, "episodes": 4, "temprature": 0.5}, "temprature"),           # unknown field
    ({**_VALID, "agent": {"max_turns": 0}}, "cfg.agent.max_turns"),         # nested, out of range
    ({**_VALID, "policy": {"kind": "human"}}, "cfg.policy"),                # no such policy kind
    ({"policy": _VALID["policy"]}, "'env' is a required property"),        # required field missing
])
def test_invalid_parameters_rejected_at_trigger_time(client, cfg, field):
    from prefect.exceptions import PrefectHTTPStatusError

    deployment = client.read_deployment_by_name("evaluate/evaluate")
    with pytest.raises(PrefectHTTPStatusError) as info:
        client.create_flow_run_from_deployment(deployment.id, parameters={"cfg": cfg})
    assert info.value.response.status_code == 409
    detail = info.value.response.json()["detail"]
    assert field in detail, detail


@pytest.mark.heavy  # three CLI runs against the worker (~50 s): make test-heavy (and .ci/run) runs it
@SQLITE_ONLY
def test_a_failed_runs_reason_reaches_the_cli_that_watched_it(deployed, tmp_path):
    """A run that fails on the worker (here: a fresh clone's missing tiny model) tells
    the person who triggered it why, and how to fix it: `ludic run FLOW --deployment`
    and `ludic watch RUN` end with the state's message (exit code 1), and Prefect's own
    `deployment run --watch` prints the flow's error, since the server (started in the
    checkout, so reading prefect.toml) streams run logs to watchers."""
    import re
    import sys

    import yaml

    env = {**deployed[3], "COLUMNS": "1000"}  # rich would wrap the long error line
    missing = tmp_path / "runs" / "models" / "tiny-1m"
    cfg = {"model_path": str(missing), "dataset_path": str(tmp_path), "out_dir": str(tmp_path / "sft")}
    reason = f"build it with `ludic model tiny --out {missing}`"
    (cfg_file := tmp_path / "sft.yaml").write_text(yaml.safe_dump(cfg))

    def ludic(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300, stdin=subprocess.DEVNULL)

    res = ludic("run", "sft", "--deployment", "--config", str(cfg_file))
    assert res.returncode == 1, res.stdout[-3000:] + res.stderr[-3000:]
    last = res.stderr.strip().splitlines()[-1]
    assert "(sft/sft) finished Failed" in last and "FileNotFoundError" in last and reason in last, res.stderr
    assert reason in res.stdout  # the run's own log lines, as they arrived
    run_id = re.search(r"started flow run '[^']+' \(([0-9a-f-]{36})\)", res.stdout)[1]

    res = ludic("watch", run_id)  # a run started elsewhere (the UI, `prefect deployment run`)
    assert res.returncode == 1 and reason in res.stderr.strip().splitlines()[-1], res.stderr

    out = subprocess.run([*PREFECT, "deployment", "run", "sft/sft", "--params", json.dumps({"cfg": cfg}), "--watch"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert out.returncode == 1 and "finished in state 'Failed'" in out.stdout + out.stderr
    assert reason in out.stdout, out.stdout[-3000:]


# --- acceptance: a user's env in its own package, outside the project -----------------

COUNTING_ENV = '''"""A user's env, in its own package: count up from seed % 5, one number per turn."""

import re
from typing import Callable

from ludic_core.envs.single_agent import SingleAgentEnv
from ludic_core.types import StepOutcome


class CountingEnv(SingleAgentEnv):
    """Each turn the agent says the number after the one shown, as <n>K</n>:
    1/turns reward per correct turn; the episode ends after `turns` turns."""

    def __init__(self, turns: int = 3) -> None:
        super().__init__()
        self.turns = turns

    @property
    def suggested_sysprompt(self) -> str:
        return "Say the next number in n tags."

    def env_reset(self, seed=None):
        self._n, self._turn = (seed or 0) % 5, 0
        return f"Count: {self._n}", {"start": self._n}

    def env_step(self, action: str) -> StepOutcome:
        correct = action.strip() == str(self._n + 1)
        self._n, self._turn = self._n + 1, self._turn + 1
        done = self._turn >= self.turns
        return StepOutcome(obs="Done." if done else f"Count: {self._n}", reward=1.0 / self.turns if correct else 0.0,
                           terminated=done, info={"correct": correct})

    @staticmethod
    def episode_metrics(rollouts) -> dict:
        """The env's own number in evaluate's table."""
        steps = [s for r in rollouts for s in r.steps]
        return {"correct_turn_rate": sum(bool(s.info.get("correct")) for s in steps) / max(len(steps), 1)}


def teacher() -> Callable[[list], str]:  # the annotation declares it a policy factory
    """Scripted teacher factory: the number after the last one shown."""

    def policy(messages):
        last = next(m["content"] for m in reversed(messages) if m["role"] == "user")
        return "<n>%d</n>" % (int(re.findall(r"[0-9]+", last)[-1]) + 1)

    return policy
'''

COUNT_ENV = {"name": "my_counting_env:CountingEnv", "kwargs": {"turns": 3}}
COUNT_AGENT = {"parser": {"name": "xml_tag", "kwargs": {"tag": "n"}},
               "context": {"name": "sliding_window", "kwargs": {"keep_last": 1}},
               "sampling": {"max_tokens": 12}, "max_turns": 3, "max_parse_failures": 1}
PROMPTS, SFT_STEPS, EVAL_EPISODES = 64, 100, 20  # 30 SFT steps do not yet teach the tiny model the tag format


@pytest.fixture(scope="module")
def user_package(deployed):
    """`my_counting_env`, written where only the worker's PYTHONPATH reaches."""
    pkg = deployed[1] / USER_PACKAGES / "my_counting_env"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(COUNTING_ENV)
    return pkg


def _evaluate_cfg(model_path: str) -> dict:
    return {"policy": {"kind": "model", "model_path": model_path}, "env": COUNT_ENV, "agent": COUNT_AGENT,
            "episodes": EVAL_EPISODES, "seed": 1_000, "success_threshold": 0.99}


@pytest.mark.heavy  # 80 s: the whole chain; .ci/run runs it (make test-heavy)
def test_user_env_package_runs_the_whole_chain_through_deployments(client, deployed, user_package, tiny_model_dir,
                                                                    tmp_path):
    """rejection_sampling -> sft -> rl_train -> evaluate, each triggered through the API
    with a full `cfg` naming the env and the teacher by import path, each reading the
    previous run's output from disk. The server and this process never import the package."""
    import importlib.util
    import re

    from datasets import load_from_disk

    assert importlib.util.find_spec("my_counting_env") is None, "the package must be the worker's alone"
    timings, t_chain = deployed[2], time.perf_counter()
    student = str(tiny_model_dir)

    # the untrained student, evaluated while the teacher samples
    base_run, base_t0 = _trigger(client, "evaluate", _evaluate_cfg(student))
    _run_deployment(client, deployed, "rejection_sampling", label="user env: rejection_sampling", cfg={
        "env": COUNT_ENV, "agent": COUNT_AGENT, "teacher": {"kind": "scripted", "policy": "my_counting_env:teacher"},
        "student_path": student, "prompts": PROMPTS, "keep": {"min_return": 0.99}, "out_dir": str(tmp_path / "rs")})
    done = json.loads((tmp_path / "rs" / "done.json").read_text())
    assert done["sampled"] == PROMPTS and done["kept"] == PROMPTS and done["token_ids"] is True, done
    rows = load_from_disk(done["dataset_path"])
    assert len(rows) == 3 * PROMPTS and set(rows["step_index"]) == {0, 1, 2}  # multi-turn: a row per turn
    for row in rows:
        system, user, reply = row["messages"]  # sliding_window keep_last 1: the latest observation only
        assert system == {"role": "system", "content": "Say the next number in n tags."}
        assert user["role"] == "user" and (m := re.fullmatch(r"Count: ([0-9])", user["content"])), user
        assert reply == {"role": "assistant", "content": f"<n>{int(m[1]) + 1}</n>"}
    assert {r["messages"][1]["content"] for r in rows} == {f"Count: {n}" for n in range(7)}

    _run_deployment(client, deployed, "sft", label="user env: sft", timeout_s=300, cfg={
        "model_path": student, "dataset_path": done["dataset_path"], "out_dir": str(tmp_path / "sft"),
        "steps": SFT_STEPS, "steps_per_stage": SFT_STEPS, "batch_size": 32,
        "trainer": {"lr": 1e-2, "warmup_steps": 5, "schedule": "cosine", "total_steps": SFT_STEPS,
                    "micro_token_budget": 16384, "max_seq_len": 512}})
    *_, last = sorted((tmp_path / "sft" / "checkpoints").glob("step_*"))
    assert last.name == f"step_{SFT_STEPS:08d}"
    sft_model = str(last / "model")

    # the SFT'd model, evaluated while RL trains on from it
    sft_eval, sft_eval_t0 = _trigger(client, "evaluate", _evaluate_cfg(sft_model))
    rl_run, _ = _run_deployment(client, deployed, "rl_train", label="user env: rl_train", cfg={
        "model_path": sft_model, "out_dir": str(tmp_path / "rl"), "env": COUNT_ENV,
        "agent": {**COUNT_AGENT, "sampling": {"max_tokens": 12, "temperature": 1.0}},
        "algorithm": {"type": "grpo", "group_size": 4}, "requests_per_step": 4, "steps": 2, "steps_per_stage": 1,
        "trainer": {"lr": 1e-4, "micro_token_budget": 16384, "max_seq_len": 512},
        "eval_episodes": 10, "eval_seed": 1_000})
    rl_model = tmp_path / "rl" / "checkpoints" / "step_00000002" / "model"
    assert (rl_model / "model.safetensors").exists()
    rl_evals = _table(client, rl_run, "rl-evaluations")
    assert [r["step"] for r in rl_evals] == [1, 2] and all("correct_turn_rate" in r for r in rl_evals), rl_evals

    final_run, _ = _run_deployment(client, deployed, "evaluate", _evaluate_cfg(str(rl_model)),
                                   label="user env: evaluate (SFT + RL)")
    _wait(client, deployed, base_run, "user env: evaluate (untrained)", base_t0)
    _wait(client, deployed, sft_eval, "user env: evaluate (SFT)", sft_eval_t0)
    timings["user env chain: total"] = time.perf_counter() - t_chain
    base, after_sft, final = (_metrics(client, r) for r in (base_run, sft_eval, final_run))
    summary = {name: {k: m[k] for k in ("mean_return", "success_rate", "parse_error_rate", "mean_turns",
                                        "correct_turn_rate")}
               for name, m in (("untrained", base), ("after SFT", after_sft), ("after SFT + RL", final))}
    print("\n[user env chain] " + json.dumps(summary))
    for m in (base, after_sft, final):
        assert GENERIC_METRICS | {"correct_turn_rate"} <= set(m) and m["episodes"] == EVAL_EPISODES, sorted(m)
    for m in (after_sft, final):
        assert m["mean_return"] > base["mean_return"] and m["success_rate"] >= base["success_rate"], summary
        assert m["parse_error_rate"] < base["parse_error_rate"] and m["mean_turns"] > base["mean_turns"], summary


def test_block_types_register_from_the_cli(client, deployed):
    """`prefect block register -m blocks` registers exactly Ludic's blocks (`blocks.__all__`;
    the UI then offers them under Blocks -> Add)."""
    import blocks

    classes = [getattr(blocks, name) for name in blocks.__all__]
    out = _run([*PREFECT, "block", "register", "-m", "blocks"], deployed[3], timeout=60)
    assert f"Successfully registered {len(classes)} blocks" in out, out
    for cls in classes:
        assert client.read_block_type_by_slug(cls.get_block_type_slug()).name == cls.get_block_type_name()


def test_the_api_refuses_clients_without_the_auth_string(deployed):
    """The server runs with PREFECT_SERVER_API_AUTH_STRING (as one reachable from
    other machines must): no credentials or wrong ones get 401; the right ones, 200."""
    import base64

    api_url, _, _, env = deployed

    def status(auth: str | None) -> int:
        req = urllib.request.Request(f"{api_url}/flows/filter", data=b"{}", method="POST",
                                     headers={"Content-Type": "application/json"})
        if auth is not None:
            req.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status
        except urllib.error.HTTPError as e:
            return e.code

    assert status(None) == 401
    assert status("ludic:wrong") == 401
    assert status(env["PREFECT_API_AUTH_STRING"]) == 200
    bare = {k: v for k, v in env.items() if k != "PREFECT_API_AUTH_STRING"}
    refused = subprocess.run([*PREFECT, "deployment", "ls"], cwd=ROOT, env=bare, capture_output=True, text=True,
                             timeout=60, stdin=subprocess.DEVNULL)
    assert refused.returncode != 0 and "401" in refused.stdout + refused.stderr


def test_secrets_stay_out_of_logs_and_artifacts(client, deployed):
    """After the runs above: the auth string appears in no flow-run log, no
    artifact, and neither the worker's nor the server's log."""
    from prefect.client.schemas.filters import LogFilter

    api_url, logs_dir, _, env = deployed
    secret = env["PREFECT_API_AUTH_STRING"].split(":", 1)[1]
    logs = client.read_logs(log_filter=LogFilter(), limit=200)
    artifacts = client.read_artifacts()
    assert logs and artifacts  # the runs above left both
    for text in [m.message for m in logs] + [json.dumps(a.data, default=str) for a in artifacts]:
        assert secret not in text
    for name in ("worker.log", "server.log", "deploy.log"):
        assert secret not in (logs_dir / name).read_text(errors="replace")


@pytest.mark.heavy
@SQLITE_ONLY
def test_sft_spans_two_nodes_through_the_train_node_deployment(client, deployed, tiny_model_dir, teacher_dataset,
                                                              tmp_path):
    """Two "machines" on loopback: the sft run is the head (one rank), and each of
    its stages triggers the train_node deployment (the other node, one rank);
    they meet at the rendezvous endpoint and train as one two-rank job."""
    from prefect.client.schemas.filters import (DeploymentFilter, DeploymentFilterName, LogFilter,
                                                LogFilterFlowRunId)

    endpoint = f"127.0.0.1:{free_port()}"
    cfg = {"model_path": str(tiny_model_dir), "dataset_path": str(teacher_dataset), "out_dir": str(tmp_path / "sft"),
           "steps": 4, "steps_per_stage": 2, "batch_size": 8, "launcher": "torchrun", "nproc": 1,
           "nodes": {"nnodes": 2, "rdzv_endpoint": endpoint, "rdzv_id": f"sft-{tmp_path.name}",
                     "join_timeout_s": 120, "node_deployments": ["train_node/train_node"]}}
    run, _ = _run_deployment(client, deployed, "sft", cfg, label="two-node sft", timeout_s=420)
    assert (tmp_path / "sft/checkpoints/step_00000004/model/config.json").is_file()
    nodes = client.read_flow_runs(deployment_filter=DeploymentFilter(
        name=DeploymentFilterName(any_=["train_node"])))
    nodes = [n for n in nodes if n.parameters["cfg"]["spec"]["checkpoint_dir"] == str(tmp_path / "sft/checkpoints")]
    assert sorted(n.name for n in nodes) == ["node 1 to step 2", "node 1 to step 4"]
    for node in nodes:
        assert node.state.is_completed(), (node.name, node.state)
        assert node.parent_task_run_id is not None  # shown under the head's stage in the UI
    deadline = time.monotonic() + 30  # the last lines reach the API shortly after the run ends
    while True:
        text = "\n".join(entry.message for entry in client.read_logs(
            log_filter=LogFilter(flow_run_id=LogFilterFlowRunId(any_=[run.id]))))
        if text.count("2 ranks") == 2 or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert text.count("2 ranks") == 2, text[-3000:]  # each stage: one job of two ranks, on two nodes
