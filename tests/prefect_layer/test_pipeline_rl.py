"""`pipeline_rl` end to end on the embedded default: a real redis-server started
by the flow, two actor rounds in flight, trainer stages consuming the stream,
weights published every step; the run's counts add up."""

import json
import os
import signal
from pathlib import Path

import pytest

from tests.procs import children, wait_gone

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_an_actor_round_running_long_is_named_once(monkeypatch):
    """The flow's poll loop names a round that has run past LONG_ROUND_S, once, and forgets
    rounds that finished (pure logic: stand-ins for the futures and the run logger)."""
    from types import SimpleNamespace

    import flows.pipeline_rl as pr

    said: list[str] = []
    monkeypatch.setattr(pr, "get_run_logger", lambda: SimpleNamespace(warning=lambda fmt, *a: said.append(fmt % a)))

    class Future:  # hashable by identity, as Prefect's are
        state = SimpleNamespace(name="Running")

    slow, quick, done = Future(), Future(), Future()
    now = pr.time.monotonic()
    in_flight = {slow: 7, quick: 8}
    since = {slow: now - pr.LONG_ROUND_S - 1, quick: now, done: now - 10 * pr.LONG_ROUND_S}
    pr._warn_long_rounds(in_flight, since)
    pr._warn_long_rounds(in_flight, since)
    assert [m.split(" (")[0] for m in said] == ["actor round 7 has run for 301 s"], said
    assert set(since) == {slow, quick}  # the finished round is forgotten, not reported


def test_pipeline_rl_counts_add_up(prefect_api, format_tuned_model_dir, tmp_path):
    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.recipes.tic_tac_toe import RECIPE

    cfg = PipelineRLConfig(
        model_path=str(format_tuned_model_dir), out_dir=str(tmp_path / "run"), env=RECIPE.env, agent=RECIPE.agent,
        algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=2, steps=4, steps_per_stage=2,
        items_per_step=12, trainer=TrainerConfig(lr=1e-4, max_seq_len=512, max_lag=2), eval_episodes=8)
    out = pipeline_rl(cfg)
    assert out["steps"] == 4 and out["items_trained"] == 4 * 12
    assert out["failed_rounds"] == 0 and out["dead_lettered"] == 0
    # every produced item is trained, dropped as stale, or still waiting in the stream
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
    lags = {int(k): v for k, v in json.loads(out["lag_histogram"]).items()}
    assert sum(lags.values()) == 48 and max(lags) <= 2
    # the stage published every step: the actors played more than the starting policy
    policies = sorted(p.name for p in (tmp_path / "run" / "policy").glob("v*"))
    assert policies[-1] == "v00000004"
    assert set(out["eval"]) >= {"mean_return", "X/win_draw_rate"}


@pytest.mark.heavy
# A fresh-clone CI run (2026-11-27, cffc44c) hung here for 30+ minutes (step 1 had every item skipped; the
# stage was retried after ~10 min); alone it passes in 30-150 s. Until the cause is found, a hang fails the
# test instead of holding CI.
@pytest.mark.timeout(900)
def test_pipeline_rl_with_two_rank_torchrun_stages(prefect_api, format_tuned_model_dir, tmp_path):
    """Each stage trains on 2 torchrun ranks: rank 0 reads the stream and
    broadcasts each batch; every item lands in exactly one checkpoint."""
    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.recipes.tic_tac_toe import RECIPE

    run = tmp_path / "run"
    out = pipeline_rl(PipelineRLConfig(
        model_path=str(format_tuned_model_dir), out_dir=str(run), env=RECIPE.env, agent=RECIPE.agent,
        algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=1, steps=4, steps_per_stage=2,
        items_per_step=12, trainer=TrainerConfig(lr=1e-4, max_seq_len=512), eval_episodes=0,
        launcher="torchrun", nproc=2))
    assert out["steps"] == 4 and out["items_trained"] == 48 and out["dead_lettered"] == 0
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
    windows = [json.loads((run / "checkpoints" / f"step_0000000{s}" / "trainer_state.json").read_text())
               ["data"]["source"]["window"] for s in (2, 4)]
    assert len(windows[0]) == len(windows[1]) == 24 and not set(windows[0]) & set(windows[1])
    state = json.loads((run / "checkpoints" / "step_00000004" / "trainer_state.json").read_text())
    assert state["world_size"] == 2


@pytest.mark.vllm
@pytest.mark.heavy  # 33 s; .ci/run runs it (make test-heavy)
def test_pipeline_rl_with_vllm_actors_and_lora_adapters(prefect_api, format_tuned_model_dir, tmp_path):
    """The actors roll out through the vLLM CPU server; every stage step of a LoRA
    run loads its adapter into it by name (no weight push), and items carry the
    adapter's version, which is what max_lag reads."""
    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from ludic_core.config import VLLMConfig
    from ludic_core.config import GRPOConfig, LoRAConfig, TrainerConfig
    from ludic_core.recipes.tic_tac_toe import RECIPE
    from ludic_core.vllm.adapters import read_published
    from ludic_core.vllm.server import VLLMServerConfig

    run = tmp_path / "run"
    cfg = PipelineRLConfig(
        model_path=str(format_tuned_model_dir), out_dir=str(run), env=RECIPE.env, agent=RECIPE.agent,
        algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=2, steps=4, steps_per_stage=2,
        items_per_step=12, trainer=TrainerConfig(lr=1e-4, max_seq_len=512, lora=LoRAConfig(r=4), max_lag=2),
        eval_episodes=0, inference="vllm", vllm=VLLMConfig(server=VLLMServerConfig(log_dir=str(tmp_path / "vllm"))))
    out = pipeline_rl(cfg)
    assert out["steps"] == 4 and out["items_trained"] == 48 and out["dead_lettered"] == 0
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
    lags = {int(k): v for k, v in json.loads(out["lag_histogram"]).items()}
    assert sum(lags.values()) == 48 and max(lags) <= 2
    assert not (run / "policy").exists()  # adapters went to the server, not to a policy directory
    (log,) = (tmp_path / "vllm").glob("server-*.log")
    text = log.read_text()
    assert "Loaded new LoRA adapter: name 'policy-v4'" in text and "POST /update_weights" not in text
    assert [r["name"] for r in read_published(run / "adapters")][-1] == "policy-v4"
    assert out["model_path"].endswith("step_00000004/model")


def test_trainer_and_actor_as_separate_flows(prefect_api, format_tuned_model_dir, tmp_path):
    """pipeline_trainer and pipeline_actor (two flow runs, as on two work pools)
    joined by a RedisQueue block and a policy directory; the actor stops by
    itself once the trainer says it is done."""
    import threading

    from blocks import RedisQueue
    from flows.pipeline_parts import PipelineActorConfig, PipelineTrainerConfig, pipeline_actor, pipeline_trainer
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.publish.directory import point_latest
    from ludic_core.queue.redis_server import LocalRedis
    from ludic_core.recipes.tic_tac_toe import RECIPE

    server = LocalRedis(tmp_path / "redis").start()
    try:
        RedisQueue(url=server.url, password=server.password, key="split:saw", max_len=200).save(
            "split-test", overwrite=True)
        policy = str(tmp_path / "policy")
        point_latest(policy, format_tuned_model_dir, 0)  # what the trainer publishes first, if the actor is early
        actor_cfg = PipelineActorConfig(redis_block="split-test", env=RECIPE.env, agent=RECIPE.agent,
                                        algorithm=GRPOConfig(group_size=2), requests_per_round=3, actors=1,
                                        policy_dir=policy)
        trainer_cfg = PipelineTrainerConfig(
            model_path=str(format_tuned_model_dir), out_dir=str(tmp_path / "trainer"), redis_block="split-test",
            algorithm=GRPOConfig(group_size=2), steps=3, steps_per_stage=3, items_per_step=10,
            trainer=TrainerConfig(lr=1e-4, max_seq_len=512, max_lag=3), policy_dir=policy)
        actor_out: dict = {}
        actor = threading.Thread(target=lambda: actor_out.update(pipeline_actor(actor_cfg)))
        actor.start()
        trained = pipeline_trainer(trainer_cfg)
        actor.join(timeout=120)
        assert not actor.is_alive(), "the actor did not stop after the trainer was done"
        from ludic_core.queue import SAWStream, connect

        stream = SAWStream(connect(server.url, password=server.password), key="split:saw")
        produced, left = stream.entries_added(), stream.backlog()
    finally:
        server.kill()
    assert trained["steps"] == 3 and trained["items_trained"] == 30
    assert actor_out["rounds"] >= 1 and actor_out["failed_rounds"] == 0
    # at the trainer's end its counts add up; the actor's last round may land after it
    assert trained["items_produced"] == trained["items_trained"] + trained["stale_dropped"] + trained["left_in_stream"]
    assert produced == actor_out["items_produced"] == 30 + trained["stale_dropped"] + left


@pytest.mark.heavy  # 31 s; .ci/run runs it (make test-heavy)
def test_a_killed_flow_run_resumes_and_trains_every_item_once(format_tuned_model_dir, tmp_path, prefect_db):
    """SIGKILL the whole `ludic run pipeline_rl` process once stage 1 is
    committed, run it again: the run's redis-server and its embedded Prefect API
    server end with it (and the re-run
    starts one on the same append-only file), the step counter continues from the
    checkpoint, and the checkpoints together hold every trained item exactly once."""
    import os
    import signal
    import subprocess
    import sys
    import time

    import yaml

    from ludic_core.recipes.tic_tac_toe import RECIPE
    from tests.prefect_db import seed_home

    run = tmp_path / "run"
    cfg = {"model_path": str(format_tuned_model_dir), "out_dir": str(run), "env": RECIPE.env.model_dump(),
           "agent": RECIPE.agent.model_dump(), "algorithm": {"type": "grpo", "group_size": 2},
           "requests_per_round": 4, "actors": 1, "steps": 4, "steps_per_stage": 2, "items_per_step": 12,
           "trainer": {"lr": 1e-4, "max_seq_len": 512, "max_lag": 2}, "eval_episodes": 0}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    root = Path(__file__).resolve().parents[2]
    seed_home(tmp_path / "prefect-home", prefect_db)
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    cmd = [sys.executable, "-m", "flows.cli", "run", "pipeline_rl", "--config", str(tmp_path / "cfg.yaml")]
    first = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (run / "checkpoints" / "step_00000002").is_dir():
        assert first.poll() is None and time.monotonic() < deadline, "stage 1 never finished"
        time.sleep(0.1)
    orphan = int((run / "redis" / "redis.pid").read_text())
    api = [pid for pid in children(first.pid) if b"uvicorn" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(api) == 1, "the run's embedded Prefect API server is not its child"
    first.send_signal(signal.SIGKILL)  # the flow run process dies; its redis-server goes with it
    first.wait()
    assert wait_gone(api[0], 20), "the killed run's embedded Prefect API server outlived it"
    deadline = time.monotonic() + 15  # the parent-death signal: SIGTERM, it flushes its append-only file
    while Path(f"/proc/{orphan}/cmdline").exists() and b"redis" in Path(f"/proc/{orphan}/cmdline").read_bytes():
        assert time.monotonic() < deadline, f"redis-server {orphan} outlived the killed run"
        time.sleep(0.1)

    done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout[done.stdout.index("{"):])
    assert out["steps"] == 4 and out["items_trained"] == 48 and out["dead_lettered"] == 0
    windows = [json.loads((run / "checkpoints" / f"step_0000000{s}" / "trainer_state.json").read_text())
               ["data"]["source"]["window"] for s in (2, 4)]
    assert len(windows[0]) == len(windows[1]) == 24 and not set(windows[0]) & set(windows[1])
    # nothing lost: every entry ever added is trained, dropped as stale, or still unread
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
    assert not Path(f"/proc/{orphan}/cmdline").exists() or b"redis" not in Path(f"/proc/{orphan}/cmdline").read_bytes()


def test_redis_killed_mid_run_is_ridden_out(prefect_api, format_tuned_model_dir, tmp_path):
    """kill -9 the RedisQueue block's server while actors and the trainer use it,
    start it again 1 s later on the same append-only file: everyone backs off,
    reconnects and goes on; the run completes with its counts adding up."""
    import threading
    import time

    from blocks import RedisQueue
    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.queue.redis_server import LocalRedis
    from ludic_core.recipes.tic_tac_toe import RECIPE

    server = LocalRedis(tmp_path / "redis").start()
    RedisQueue(url=server.url, password=server.password, key="crash:saw", max_len=24).save("crash-test",
                                                                                          overwrite=True)
    run = tmp_path / "run"
    killed = threading.Event()

    def crash_once_training_is_under_way():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not (run / "metrics.jsonl").exists():
            time.sleep(0.05)
        server.kill()
        killed.set()
        time.sleep(1.0)
        server.start()

    crasher = threading.Thread(target=crash_once_training_is_under_way, daemon=True)
    crasher.start()
    try:
        out = pipeline_rl(PipelineRLConfig(
            model_path=str(format_tuned_model_dir), out_dir=str(run), env=RECIPE.env, agent=RECIPE.agent,
            algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=1, steps=4, steps_per_stage=2,
            items_per_step=12, trainer=TrainerConfig(lr=1e-4, max_seq_len=512), eval_episodes=0,
            redis_block="crash-test"))
        crasher.join(timeout=30)
    finally:
        server.kill()
    assert killed.is_set(), "the run ended before redis could be killed"
    assert out["steps"] == 4 and out["items_trained"] == 48 and out["failed_rounds"] == 0
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]


def _actor_workers() -> list[int]:
    """Pids of this process's actor worker children (ludic_core.queue.actor_pool)."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            ppid = int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
            cmd = (proc / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == os.getpid() and b"ludic_core.queue.actor_pool" in cmd:
            pids.append(int(proc.name))
    return pids


@pytest.mark.heavy
def test_a_sigkilled_actor_process_is_retried_and_nothing_is_trained_twice(prefect_api, format_tuned_model_dir,
                                                                           tmp_path):
    """Actor rounds in worker processes; kill -9 the worker mid-run: its round
    fails, Prefect retries it (same round index) in a fresh worker, the run
    completes, and every produced item is trained once, dropped or left."""
    import threading
    import time

    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

    from flows.pipeline_rl import ActorLaunch, PipelineRLConfig, pipeline_rl
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.recipes.tic_tac_toe import RECIPE

    killed: list[int] = []

    def kill_a_worker_mid_round():
        """kill -9 the worker playing round 2 or later (past torch's import, mid-round), as
        the pool reports it: a wall-clock delay raced the run's end on a fast machine."""
        from ludic_core.queue import actor_pool

        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            for pool in list(actor_pool._POOLS.values()):
                busy = [pid for pid, index in pool.in_flight().items() if index is not None and index >= 2]
                if busy:
                    os.kill(busy[0], signal.SIGKILL)
                    killed.append(busy[0])
                    return
            time.sleep(0.005)

    killer = threading.Thread(target=kill_a_worker_mid_round, daemon=True)
    killer.start()
    state = pipeline_rl(PipelineRLConfig(
        model_path=str(format_tuned_model_dir), out_dir=str(tmp_path / "run"), env=RECIPE.env, agent=RECIPE.agent,
        algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=1, steps=4, steps_per_stage=2,
        items_per_step=12, trainer=TrainerConfig(lr=1e-4, max_seq_len=512), eval_episodes=0,
        actor_launch=ActorLaunch(mode="process")), return_state=True)
    killer.join(timeout=30)
    out = state.result()
    assert killed, "the run ended before a worker could be killed"
    assert out["steps"] == 4 and out["items_trained"] == 48 and out["failed_rounds"] == 0
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
    assert not _actor_workers()  # the pool closed its workers
    with get_client(sync_client=True) as client:
        runs = client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=[
            state.state_details.flow_run_id])))
    retried = [r for r in runs if r.name.startswith("actor-round") and r.run_count > 1]
    assert len(retried) == 1 and retried[0].state.is_completed()


@pytest.mark.vllm
@pytest.mark.heavy
def test_vllm_server_killed_mid_pipeline_is_restarted_and_the_run_completes(prefect_api, format_tuned_model_dir,
                                                                          tmp_path):
    """kill -9 the actors' vLLM server once step 2 is checkpointed: the failed
    stage is retried after the server is restarted (and given the trainer's
    weights again), actors wait for it, and the counts still add up."""
    import threading
    import time

    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from ludic_core.config import VLLMConfig
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.recipes.tic_tac_toe import RECIPE
    from ludic_core.vllm.server import VLLMServerConfig, pid_alive
    from tests.prefect_layer.test_vllm_flow import _private_copy, _servers_of

    run = tmp_path / "run"
    killed: list[int] = []
    model_dir = _private_copy(format_tuned_model_dir, tmp_path)  # the killer kills every server of it

    def killer() -> None:
        deadline = time.time() + 600
        while time.time() < deadline and not killed:
            if (run / "checkpoints" / "step_00000002").is_dir():
                for pid in _servers_of(model_dir):
                    os.killpg(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)

    watcher = threading.Thread(target=killer, daemon=True)
    watcher.start()
    out = pipeline_rl(PipelineRLConfig(
        model_path=str(model_dir), out_dir=str(run), env=RECIPE.env, agent=RECIPE.agent,
        algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=1, steps=4, steps_per_stage=4,
        items_per_step=12, eval_episodes=0, inference="vllm",
        trainer=TrainerConfig(lr=1e-4, max_seq_len=512, checkpoint_every=1, max_lag=2),
        vllm=VLLMConfig(server=VLLMServerConfig(log_dir=str(tmp_path / "vllm")))))
    watcher.join(timeout=1)
    assert killed, "the run finished before the server could be killed"
    assert out["steps"] >= 4 and out["items_trained"] == 48 and out["dead_lettered"] == 0
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
    steps = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert steps[-1] == 4 and steps.count(1) == 1, steps  # the retry resumed from a checkpoint
    (log,) = (tmp_path / "vllm").glob("server-*.log")  # the restart reuses the port, and appends to its log
    assert log.read_text().count("Application startup complete") == 2
    assert not _servers_of(model_dir) and not pid_alive(killed[0])
