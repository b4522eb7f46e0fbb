"""A deployed rl_train run with a vLLM server and torchrun ranks up, ended the
ways runs end in production: cancelled from the API (as the UI's Cancel does),
and its worker's machine gone (the worker and the flow-run process SIGKILLed);
and a re-run that lives through a restart of the Prefect server.

Each time: every process of the run is gone (found by the flow-run id its
whole process tree inherits in its environment, listed before and after), the
last committed checkpoint loads, and a new run of the same config continues
the step counter from it. The killed run, which cannot report its own end, is
marked Crashed by `ludic zombies`' automation once its heartbeats stop.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from ludic_core.ports import free_port
from tests.procs import with_environ
from tests.prefect_layer.stack import PREFECT, _run, _start, _stop, _tail, base_env, start_server

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.vllm, pytest.mark.first]  # ~7 min of the heavy run

POOL = "ludic-cancel"
HEARTBEAT_S = 30  # Prefect's minimum
STEPS = 12
STAGE = STEPS // 2  # two checkpointed stages a run


class Stack:
    """A server, the deployments, and a worker that can be killed and restarted."""

    def __init__(self, tmp: Path, db: Path) -> None:
        self.tmp, self.api_url = tmp, f"http://127.0.0.1:{free_port()}/api"
        self.env = base_env(self.api_url, tmp / "home", db)
        self.env["PREFECT_FLOWS_HEARTBEAT_FREQUENCY"] = str(HEARTBEAT_S)
        self.server = start_server(self.api_url, self.env, tmp / "server.log")
        self.worker: subprocess.Popen | None = None
        self.workers = 0

    def start_worker(self) -> None:
        self.workers += 1
        self.worker = _start([*PREFECT, "worker", "start", "--pool", POOL, "--name", f"worker-{self.workers}"],
                             self.env, self.tmp / f"worker-{self.workers}.log")

    def restart_server(self) -> None:
        """Stop the server (its process group) and start it again on the same port and database."""
        _stop(self.server)
        self.restarts = getattr(self, "restarts", 0) + 1
        self.server = start_server(self.api_url, self.env, self.tmp / f"server-{self.restarts}.log")

    def worker_log(self) -> str:
        return _tail(self.tmp / f"worker-{self.workers}.log")


@pytest.fixture(scope="module")
def stack(tmp_path_factory, prefect_db):
    s = Stack(tmp_path_factory.mktemp("prefect-cancel"), prefect_db)
    try:
        _run([*PREFECT, "work-pool", "create", POOL, "--type", "process"], s.env, timeout=60)
        # the deployments of prefect.yaml, onto this pool
        spec = Path(__file__).resolve().parents[2] / "prefect.yaml"
        text = spec.read_text().replace("name: ludic-process", f"name: {POOL}")
        (s.tmp / "prefect.yaml").write_text(text)
        _run([*PREFECT, "--no-prompt", "deploy", "--all", "--prefect-file", str(s.tmp / "prefect.yaml")], s.env,
             timeout=180)
        out = _run([str(Path(sys.executable).parent / "ludic"), "zombies",
                    "--within", str(2 * HEARTBEAT_S)], s.env, timeout=60)
        assert "automation" in out and f"for {2 * HEARTBEAT_S} s" in out, out
        s.start_worker()
        yield s
    finally:
        if s.worker is not None:
            _stop(s.worker)
        _stop(s.server)


@pytest.fixture
def client(stack):
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings({PREFECT_API_URL: stack.api_url}):
        with get_client(sync_client=True) as c:
            yield c


def run_processes(run_id) -> dict[int, str]:
    """pid -> command line of every live process of a flow run: the flow-run process
    and everything it started (in whatever session), all of which inherit its id."""
    return with_environ(f"PREFECT__FLOW_RUN_ID={run_id}")


def _kinds(procs: dict[int, str]) -> dict[str, int]:
    return {"vllm": sum("vllm" in c for c in procs.values()),
            "torchrun agent": sum("torch.distributed.run" in c for c in procs.values()),
            "ranks": sum("ludic_core.stages.run" in c and "torch.distributed.run" not in c
                         for c in procs.values())}


def _cfg(out: Path, model: str) -> dict:
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV

    return {"model_path": model, "out_dir": str(out), "env": ENV.model_dump(mode="json"),
            "agent": AGENT.model_dump(mode="json"), "algorithm": {"type": "grpo", "group_size": 2},
            "requests_per_step": 2, "steps": STEPS, "steps_per_stage": STAGE, "eval_episodes": 0,
            "trainer": {"lr": 1e-4, "micro_token_budget": 8192, "max_seq_len": 512, "checkpoint_every": 1,
                        "device": "cpu"},
            "inference": "vllm", "launcher": "torchrun", "nproc": 2}


def _trigger(client, cfg: dict):
    deployment = client.read_deployment_by_name("rl_train/rl_train")
    return client.create_flow_run_from_deployment(deployment.id, parameters={"cfg": cfg})


def _step(out: Path) -> int:
    from ludic_core.training.checkpoint import latest_checkpoint

    latest = latest_checkpoint(out / "checkpoints")
    return int(latest.name.rsplit("_", 1)[-1]) if latest else 0


def _wait_training(client, stack, run, out: Path, min_step: int = 2, timeout_s: float = 420) -> dict[int, str]:
    """Until a checkpoint >= min_step is committed while the server and both ranks run."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = client.read_flow_run(run.id).state
        assert not state.is_final(), f"run ended ({state.type.value}: {state.message}) before the test could " \
                                     f"interrupt it:\n{stack.worker_log()}"
        procs = run_processes(run.id)
        kinds = _kinds(procs)
        if _step(out) >= min_step and kinds["vllm"] and kinds["torchrun agent"] and kinds["ranks"] >= 2:
            return procs
        assert time.monotonic() < deadline, f"not training after {timeout_s} s ({kinds}, step {_step(out)}):\n" \
                                            f"{stack.worker_log()}"
        time.sleep(0.5)


def _wait_gone(run_id, timeout_s: float) -> dict[int, str]:
    deadline = time.monotonic() + timeout_s
    while (left := run_processes(run_id)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def _wait_state(client, run, want: str, timeout_s: float, stack) -> float:
    t0 = time.monotonic()
    while (state := client.read_flow_run(run.id).state).type.value != want:
        assert time.monotonic() - t0 < timeout_s, \
            f"run is {state.type.value} ({state.message}), not {want}, after {timeout_s} s:\n{stack.worker_log()}"
        time.sleep(1)
    return time.monotonic() - t0


def _checkpoint_loads(out: Path) -> int:
    from transformers import AutoModelForCausalLM

    from ludic_core.training.checkpoint import latest_checkpoint

    latest = latest_checkpoint(out / "checkpoints")
    assert latest is not None and (latest / "model" / "model.safetensors").exists()
    AutoModelForCausalLM.from_pretrained(latest / "model")  # whole: a torn file would not load
    return _step(out)


def _rerun_continues(client, stack, cfg: dict, out: Path, committed: int, *,
                     during: tuple[int, Callable[[], None]] | None = None) -> tuple[list[int], Any]:
    """Run the same config again: it completes, its steps are the ones after `committed`, each trained
    once, and it leaves no process. `during` (step, callback): the callback runs once the re-run has
    committed a checkpoint past that step. Returns the re-run's steps and the re-run."""
    metrics = out / "metrics.jsonl"
    before = len(metrics.read_text().splitlines()) if metrics.exists() else 0
    rerun = _trigger(client, cfg)
    if during is not None:
        _wait_training(client, stack, rerun, out, min_step=during[0] + 1)
        during[1]()
    _wait_state(client, rerun, "COMPLETED", 600, stack)
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()[before:] if line.strip()]
    assert steps == list(range(committed + 1, STEPS + 1)), (committed, steps)  # nothing lost, nothing twice
    assert _step(out) == STEPS
    assert not _wait_gone(rerun.id, 30), "a completed run left processes behind"
    return steps, rerun


def test_cancel_ends_every_process_and_a_rerun_resumes_through_a_server_restart(client, stack, tiny_model_dir,
                                                                                 tmp_path):
    """Cancelled mid-stage: the run ends with every process. Its re-run resumes from the last
    committed checkpoint; the server goes down while the re-run's second stage trains and comes
    back on the same database: the re-run's clients retry through the outage, it completes with
    every step trained once, its stage task runs from before the outage are still on record, and
    nothing is left."""
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.states import Cancelling

    out = tmp_path / "rl"
    cfg = _cfg(out, str(tiny_model_dir))
    run = _trigger(client, cfg)
    before = _wait_training(client, stack, run, out)
    t0 = time.monotonic()
    client.set_flow_run_state(run.id, Cancelling(), force=True)  # what the UI's Cancel does
    cancel_s = _wait_state(client, run, "CANCELLED", 180, stack)
    left = _wait_gone(run.id, 60)
    gone_s = time.monotonic() - t0
    print(f"\n[cancel] processes before: {json.dumps({p: c[:100] for p, c in before.items()}, indent=1)}")
    print(f"[cancel] Cancelled after {cancel_s:.1f} s, every process gone after {gone_s:.1f} s; left: {left}")
    assert not left, f"processes outlived the cancelled run: {left}"
    committed = _checkpoint_loads(out)
    assert 2 <= committed < STEPS

    restart: dict[str, float] = {}

    def restart_server() -> None:  # while the re-run's second stage trains
        restart["at_step"], t = _step(out), time.monotonic()
        stack.restart_server()
        restart["down_s"], restart["t"] = time.monotonic() - t, time.monotonic()

    steps, rerun = _rerun_continues(client, stack, cfg, out, committed,
                                    during=(max(committed, STAGE), restart_server))
    done_s = time.monotonic() - restart["t"]
    stages = [t for t in client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[rerun.id])))
              if t.task_key.startswith("train-stage") or t.name.startswith("train-stage")]
    want = 1 if committed >= STAGE else 2  # a stage whose checkpoint exists is skipped, with no task run
    assert len(stages) == want and all(t.state.is_completed() for t in stages), \
        (committed, [(t.name, t.state.type.value) for t in stages])
    print(f"[server restart] the re-run resumed after step {committed}; the server restarted at step "
          f"{restart['at_step']:.0f} (down and healthy again in {restart['down_s']:.1f} s); the re-run completed, "
          f"its processes gone, {done_s:.0f} s later, with steps {steps[0]}..{steps[-1]} trained once each")
    assert _checkpoint_loads(out) == STEPS


def test_a_killed_worker_leaves_no_process_the_zombie_is_crashed_and_a_rerun_resumes(client, stack, tiny_model_dir,
                                                                                     tmp_path):
    out = tmp_path / "rl"
    cfg = _cfg(out, str(tiny_model_dir))
    run = _trigger(client, cfg)
    before = _wait_training(client, stack, run, out)
    flow_run_pids = [p for p, c in before.items() if "prefect" in c and "vllm" not in c
                     and "torch" not in c and "ludic_core.training" not in c]
    assert flow_run_pids, before
    t0 = time.monotonic()
    os.killpg(stack.worker.pid, signal.SIGKILL)  # the worker's machine is gone: worker and flow-run process
    for pid in flow_run_pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stack.worker.wait()
    left = _wait_gone(run.id, 60)
    gone_s = time.monotonic() - t0
    print(f"\n[worker killed] processes before: {json.dumps({p: c[:100] for p, c in before.items()}, indent=1)}")
    print(f"[worker killed] every process gone after {gone_s:.1f} s; left: {left}")
    assert not left, f"processes outlived their SIGKILLed flow run: {left}"
    assert client.read_flow_run(run.id).state.type.value == "RUNNING"  # nobody could say otherwise yet
    crashed_s = _wait_state(client, run, "CRASHED", 6 * HEARTBEAT_S, stack)
    print(f"[worker killed] the zombie run was marked Crashed {crashed_s:.0f} s later "
          f"(heartbeat {HEARTBEAT_S} s, within {2 * HEARTBEAT_S} s)")
    committed = _checkpoint_loads(out)
    stack.start_worker()
    steps, _ = _rerun_continues(client, stack, cfg, out, committed)
    print(f"[worker killed] last committed checkpoint {committed}; the re-run trained steps {steps[0]}..{steps[-1]}")
