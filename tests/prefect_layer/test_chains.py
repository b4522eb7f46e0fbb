"""The chain of prefect.yaml (docs/chains.md) on a real server: `prefect server start`
(its triggers and actions services on, as by default), a process work pool, the four
`chain-*` deployments deployed with `prefect deploy` (their triggers become automations),
a worker. The test starts only the first stage; the triggers do the rest.

What is deployed is prefect.yaml's chain with smaller numbers (a few prompts, 3 SFT steps,
1 RL step, 4 evaluation episodes) and the chains' root in a tmp dir instead of runs/chains:
the triggers, their matching and their templates are the file's own.
"""

from __future__ import annotations

import copy
import json
import secrets
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from ludic_core.ports import free_port
from tests.prefect_layer.stack import PREFECT, ROOT, _run, _start, _stop, _tail, base_env, start_server

pytestmark = [pytest.mark.slow, pytest.mark.heavy]  # ~2.5 min on 2 busy cores (a minute of it the chain): make test-heavy

POOL = "ludic-process"
CHAIN = ("rejection_sampling", "sft", "rl_train", "evaluate")
SMALL = {  # per stage: what the small copy changes in the deployment's cfg and in its trigger's
    "sft": {"steps": 3, "steps_per_stage": 3, "batch_size": 8},
    "rl_train": {"steps": 1, "steps_per_stage": 1, "requests_per_step": 2, "eval_episodes": 0,
                 "algorithm": {"type": "grpo", "group_size": 2}},
    "evaluate": {"episodes": 4},
}


def _rooted(value, root: str):
    """Every "runs/chains/..." string (templates included) moved under `root`."""
    if isinstance(value, dict):
        return {k: _rooted(v, root) for k, v in value.items()}
    if isinstance(value, str) and value.startswith("runs/chains/"):
        return root + value.removeprefix("runs/chains")
    return value


def shrunk(d: dict, small: dict, root: str) -> dict:
    """Deployment `d` (changed in place) with `small` merged into its cfg and its triggers' cfgs,
    and its "runs/chains/..." paths moved under `root`."""
    d["parameters"]["cfg"] = _rooted({**d["parameters"]["cfg"], **small}, root)
    for trigger in d.get("triggers", []):
        trigger["parameters"]["cfg"] = _rooted({**trigger["parameters"]["cfg"], **small}, root)
    return d


def small_chain_file(root: Path, out: Path) -> Path:
    """prefect.yaml's chain-* deployments, smaller, writing under `root`."""
    spec = yaml.safe_load((ROOT / "prefect.yaml").read_text())
    deployments = []
    for d in spec["deployments"]:
        if not d["name"].startswith("chain-"):
            continue
        deployments.append(shrunk(copy.deepcopy(d), SMALL.get(d["name"].removeprefix("chain-"), {}), str(root)))
    assert [d["name"] for d in deployments] == [f"chain-{s}" for s in CHAIN]
    out.write_text(yaml.safe_dump({**spec, "deployments": deployments}, sort_keys=False))
    return out


@pytest.fixture(scope="module")
def chained(tmp_path_factory, prefect_db):
    """A server with the small chain deployed, a worker; yields (client env, tmp dir, chains root)."""
    tmp = tmp_path_factory.mktemp("prefect-chain")
    api_url = f"http://127.0.0.1:{free_port()}/api"
    env = base_env(api_url, tmp / "home", prefect_db)
    timings: dict[str, float] = {}
    procs: list[subprocess.Popen] = []
    try:
        t0 = time.perf_counter()
        procs.append(start_server(api_url, env, tmp / "server.log"))
        timings["server healthy"] = time.perf_counter() - t0
        _run([*PREFECT, "work-pool", "create", POOL, "--type", "process"], env, timeout=60)
        t0 = time.perf_counter()
        chain_file = small_chain_file(tmp / "chains", tmp / "prefect.yaml")
        out = _run([*PREFECT, "--no-prompt", "deploy", "--all", "--prefect-file", str(chain_file)], env, timeout=240)
        timings["deploy"] = time.perf_counter() - t0
        (tmp / "deploy.log").write_text(out)
        procs.append(_start([*PREFECT, "worker", "start", "--pool", POOL, "--name", "chain-worker"], env,
                            tmp / "worker.log"))
        yield env, tmp, tmp / "chains", timings
    finally:
        for proc in reversed(procs):
            _stop(proc)
        print("\n[chain timings] " + json.dumps({k: round(v, 1) for k, v in timings.items()}))


@pytest.fixture
def client(chained):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: chained[0]["PREFECT_API_URL"]}):
        with get_client(sync_client=True) as c:
            yield c


def _runs_of(client, stage: str, chain_id: str) -> list:
    """The runs of deployment chain-STAGE in chain `chain_id`, oldest first."""
    from prefect.client.schemas.filters import DeploymentFilter, DeploymentFilterName
    from prefect.client.schemas.sorting import FlowRunSort

    runs = client.read_flow_runs(deployment_filter=DeploymentFilter(name=DeploymentFilterName(any_=[f"chain-{stage}"])),
                                 sort=FlowRunSort.EXPECTED_START_TIME_ASC)
    return [r for r in runs if ((r.parameters.get("cfg") or {}).get("chain") or {}).get("id") == chain_id]


def _wait_final(client, chained, run_id, label: str, timeout_s: float = 300):
    deadline = time.monotonic() + timeout_s
    while not (run := client.read_flow_run(run_id)).state.is_final():
        assert time.monotonic() < deadline, f"{label}: still {run.state.type.value} after {timeout_s} s\n" \
                                            f"{_tail(chained[1] / 'worker.log')}"
        time.sleep(1)
    return run


def _wait_triggered(client, chained, stage: str, chain_id: str, count: int = 1, timeout_s: float = 120):
    """The `count`-th run of chain-STAGE in the chain, once it exists (the trigger made it)."""
    deadline = time.monotonic() + timeout_s
    while len(runs := _runs_of(client, stage, chain_id)) < count:
        assert time.monotonic() < deadline, f"no run {count} of chain-{stage} for chain {chain_id!r} after " \
                                            f"{timeout_s} s\n{_tail(chained[1] / 'server.log')}"
        time.sleep(1)
    return runs[count - 1]


def _start_chain(client, chained, chain_id: str, student_path: str, prompts: int = 16):
    deployment = client.read_deployment_by_name("rejection_sampling/chain-rejection_sampling")
    cfg = {**deployment.parameters["cfg"], "chain": {"id": chain_id}, "student_path": student_path,
           "out_dir": str(chained[2] / chain_id / "rejection"), "prompts": prompts}
    return client.create_flow_run_from_deployment(deployment.id, parameters={"cfg": cfg})


def _artifact(client, run, key: str) -> str:
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    artifacts = client.read_artifacts(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[run.id])))
    [artifact] = [a for a in artifacts if a.key == key]
    return artifact.data


def test_the_chain_runs_itself_stops_at_a_failure_and_reruns_downstream(client, chained, tiny_model_dir):
    timings = chained[3]
    automations = {a.name for a in client.read_automations()}
    assert {"ludic chain: chain-rejection_sampling -> chain-sft", "ludic chain: chain-sft -> chain-rl_train",
            "ludic chain: chain-rl_train -> chain-evaluate"} <= automations, automations

    # (b) a chain whose first stage fails (no student model there): its run says where the chain stopped
    broken = _start_chain(client, chained, "broken", str(chained[1] / "no-such-model"))
    failed = _wait_final(client, chained, broken.id, "broken chain: rejection_sampling")
    assert failed.state.is_failed(), failed.state
    assert "chain 'broken' stopped at stage rejection_sampling: FileNotFoundError: student_path" \
        in failed.state.message, failed.state.message

    # (a) a good chain: the test starts stage 1 only; each Completed run triggers the next stage
    chain_id, t_chain = f"good-{secrets.token_hex(3)}", time.perf_counter()
    runs = {"rejection_sampling": _start_chain(client, chained, chain_id, str(tiny_model_dir))}
    for upstream, stage in zip(CHAIN, CHAIN[1:]):
        t0 = time.perf_counter()
        done = _wait_final(client, chained, runs[upstream].id, f"{chain_id}: {upstream}")
        assert done.state.is_completed(), f"{upstream}: {done.state.message}\n{_tail(chained[1] / 'worker.log')}"
        timings[f"{upstream} run"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        runs[stage] = _wait_triggered(client, chained, stage, chain_id)
        timings[f"{upstream} Completed -> {stage} run exists"] = time.perf_counter() - t0
    last = _wait_final(client, chained, runs["evaluate"].id, f"{chain_id}: evaluate")
    assert last.state.is_completed(), last.state.message
    timings["good chain: start -> evaluate Completed"] = time.perf_counter() - t_chain
    root = chained[2] / chain_id
    assert (root / "sft/checkpoints/step_00000003/model/config.json").is_file()
    assert (root / "rl/checkpoints/step_00000001/model/config.json").is_file()
    evaluation = {row["metric"]: row["value"] for row in json.loads(_artifact(client, last, "evaluation"))}
    assert evaluation["episodes"] == 4

    # (c) lineage: each downstream run names the run that triggered it, and was created by its automation
    for upstream, stage in zip(CHAIN, CHAIN[1:]):
        run = client.read_flow_run(runs[stage].id)
        link = run.parameters["cfg"]["chain"]
        assert link == {"id": chain_id, "upstream_run": str(runs[upstream].id)}, (stage, link)
        assert run.created_by is not None and run.created_by.type == "AUTOMATION", (stage, run.created_by)
        assert run.created_by.display_value == f"ludic chain: chain-{upstream} -> chain-{stage}"
        lineage = _artifact(client, run, "chain-lineage")
        assert str(runs[upstream].id) in lineage and f"chain-{upstream} run" in lineage, lineage
    assert client.read_flow_run(runs["sft"].id).parameters["cfg"]["dataset_path"] == \
        str(root / "rejection" / "dataset")

    # 3. re-running a stage re-triggers what follows: rl_train again (its checkpoint exists: skipped)
    rl = client.read_flow_run(runs["rl_train"].id)
    rerun = client.create_flow_run_from_deployment(rl.deployment_id, parameters=rl.parameters)
    assert _wait_final(client, chained, rerun.id, f"{chain_id}: rl_train re-run").state.is_completed()
    again = _wait_triggered(client, chained, "evaluate", chain_id, count=2)
    assert again.parameters["cfg"]["chain"]["upstream_run"] == str(rerun.id)
    assert _wait_final(client, chained, again.id, f"{chain_id}: evaluate again").state.is_completed()

    # (b) the broken chain got no run past its failed stage (the good chain ran meanwhile, minutes)
    for stage in CHAIN[1:]:
        assert _runs_of(client, stage, "broken") == [], stage
