"""`pipeline_rl` end to end on the embedded default: a real redis-server started
by the flow, two actor rounds in flight, trainer stages consuming the stream,
weights published every step; the run's counts add up."""

import json

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_pipeline_rl_counts_add_up(prefect_api, format_tuned_model_dir, tmp_path):
    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.recipes.tic_tac_toe import RECIPE

    cfg = PipelineRLConfig(
        model_path=str(format_tuned_model_dir), out_dir=str(tmp_path / "run"), env=RECIPE.env, agent=RECIPE.agent,
        algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=2, steps=4, steps_per_stage=2,
        items_per_step=12, max_lag=2, trainer=TrainerConfig(lr=1e-4, max_seq_len=512), eval_episodes=8)
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


@pytest.mark.vllm
def test_pipeline_rl_with_vllm_actors(prefect_api, format_tuned_model_dir, tmp_path):
    """The actors roll out through the vLLM CPU server; every stage step pushes
    its weights into it, and items carry the server's weight version."""
    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from flows.vllm_inference import VLLMSettings
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.inference.vllm_server import VLLMServerConfig
    from ludic_core.recipes.tic_tac_toe import RECIPE

    cfg = PipelineRLConfig(
        model_path=str(format_tuned_model_dir), out_dir=str(tmp_path / "run"), env=RECIPE.env, agent=RECIPE.agent,
        algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=2, steps=4, steps_per_stage=2,
        items_per_step=12, max_lag=2, trainer=TrainerConfig(lr=1e-4, max_seq_len=512), eval_episodes=0,
        inference="vllm", vllm=VLLMSettings(server=VLLMServerConfig(log_dir=str(tmp_path / "vllm"))))
    out = pipeline_rl(cfg)
    assert out["steps"] == 4 and out["items_trained"] == 48 and out["dead_lettered"] == 0
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
    lags = {int(k): v for k, v in json.loads(out["lag_histogram"]).items()}
    assert sum(lags.values()) == 48 and max(lags) <= 2
    assert not (tmp_path / "run" / "policy").exists()  # weights went to the server, not to a directory


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
            algorithm=GRPOConfig(group_size=2), steps=3, steps_per_stage=3, items_per_step=10, max_lag=3,
            trainer=TrainerConfig(lr=1e-4, max_seq_len=512), policy_dir=policy)
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


def test_a_killed_flow_run_resumes_and_trains_every_item_once(format_tuned_model_dir, tmp_path):
    """SIGKILL the whole `ludic run pipeline_rl` process once stage 1 is
    committed, run it again: the step counter continues from the checkpoint,
    the orphaned redis-server is taken over (same append-only file), and the
    checkpoints together hold every trained item exactly once."""
    import os
    import signal
    import subprocess
    import sys
    import time
    from pathlib import Path

    import yaml

    from ludic_core.recipes.tic_tac_toe import RECIPE

    run = tmp_path / "run"
    cfg = {"model_path": str(format_tuned_model_dir), "out_dir": str(run), "env": RECIPE.env.model_dump(),
           "agent": RECIPE.agent.model_dump(), "algorithm": {"type": "grpo", "group_size": 2},
           "requests_per_round": 4, "actors": 1, "steps": 4, "steps_per_stage": 2, "items_per_step": 12,
           "max_lag": 2, "trainer": {"lr": 1e-4, "max_seq_len": 512}, "eval_episodes": 0}
    (tmp_path / "cfg.yaml").write_text(yaml.safe_dump(cfg))
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    cmd = [sys.executable, "-m", "flows.cli", "run", "pipeline_rl", "--config", str(tmp_path / "cfg.yaml")]
    first = subprocess.Popen(cmd, cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (run / "checkpoints" / "step_00000002").is_dir():
        assert first.poll() is None and time.monotonic() < deadline, "stage 1 never finished"
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)  # the flow run process dies; its redis-server lives on
    first.wait()
    orphan = int((run / "redis" / "redis.pid").read_text())

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
            items_per_step=12, max_lag=None, trainer=TrainerConfig(lr=1e-4, max_seq_len=512), eval_episodes=0,
            redis_block="crash-test"))
        crasher.join(timeout=30)
    finally:
        server.kill()
    assert killed.is_set(), "the run ended before redis could be killed"
    assert out["steps"] == 4 and out["items_trained"] == 48 and out["failed_rounds"] == 0
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
