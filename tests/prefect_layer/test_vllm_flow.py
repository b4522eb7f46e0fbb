"""rl_train with rollouts on a real vLLM server: the server is SIGKILLed
mid-run (full fine-tune, LoRA), the flow restarts it and retries the stage
from the last checkpoint."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from flows.rl_train import RLTrainConfig, rl_train
from ludic_core.config import GRPOConfig, TrainerConfig, VLLMConfig
from ludic_core.recipes.tic_tac_toe import AGENT, ENV
from ludic_core.vllm.server import START_MARK, VLLMServerConfig, pid_alive


def _servers_of(model_dir: Path) -> list[int]:
    """PIDs of vLLM API servers serving `model_dir` (their process-group leaders)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "vllm.entrypoints.openai.api_server" in cmd and f"--model {model_dir.resolve()} " in cmd:
                pids.append(int(entry.name))
    return [p for p in pids if os.getpgid(p) == p] if pids else []


def _private_copy(model_dir: str, tmp_path: Path) -> Path:
    """A copy of the session's shared model for this test alone: the watcher kills every server of
    its directory, and another xdist worker may be serving the shared one at the same time."""
    import shutil

    return Path(shutil.copytree(model_dir, tmp_path / "served-model"))


def _kill_server_after(model_dir: Path, checkpoint: Path, killed: list[int]) -> None:
    """SIGKILL the process groups of the servers of `model_dir` once `checkpoint` exists (their pids to `killed`)."""
    deadline = time.time() + 600
    while time.time() < deadline and not killed:
        if checkpoint.is_dir():
            for pid in _servers_of(model_dir):
                os.killpg(pid, signal.SIGKILL)
                killed.append(pid)
        time.sleep(0.05)


def _run_killing_the_server(cfg: RLTrainConfig, model_dir: Path, checkpoint: Path) -> tuple[str, list[int]]:
    """rl_train(cfg) while a watcher SIGKILLs the server's whole process group once `checkpoint`
    exists: (the run's result, the pids killed)."""
    killed: list[int] = []
    watcher = threading.Thread(target=_kill_server_after, args=(model_dir, checkpoint, killed), daemon=True)
    watcher.start()
    model = rl_train(cfg)
    watcher.join(timeout=1)
    assert killed, "the run finished before the server could be killed"
    return model, killed


def test_vllm_config_is_strict():
    with pytest.raises(ValueError, match="stage_atempts"):
        VLLMConfig.model_validate({"stage_atempts": 2})
    cfg = RLTrainConfig.model_validate({"model_path": "m", "env": {"name": "tic_tac_toe"}, "inference": "vllm",
                                        "vllm": {"server": {"port": 8011}}})
    assert cfg.vllm.server.port == 8011 and cfg.vllm.endpoint_block is None
    with pytest.raises(ValueError, match="vllm.server.prot"):
        RLTrainConfig.model_validate({"model_path": "m", "env": {"name": "tic_tac_toe"}, "inference": "vllm",
                                      "vllm": {"server": {"prot": 8011}}})


def test_one_vllm_config():
    """`VLLMConfig` is the one vLLM config (issue 56): the policy shares its server part, the
    stages' endpoint its push part; the flows' old name warns and is that class."""
    import flows.vllm_inference as vi
    from flows.policies import VLLMPolicy
    from ludic_core.config import VLLMServing, WeightPush

    with pytest.warns(DeprecationWarning, match="ludic_core.config.VLLMConfig"):
        assert vi.VLLMSettings is VLLMConfig
    cfg = VLLMConfig(bucket_mb=8, lora={"mode": "merged"})
    endpoint = cfg.endpoint("http://127.0.0.1:1/v1", "policy", "KEY")
    assert (endpoint.bucket_mb, endpoint.lora, endpoint.api_key_env) == (8, cfg.lora, "KEY")
    assert issubclass(VLLMPolicy, VLLMServing) and isinstance(endpoint, WeightPush)


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.heavy  # 65 s; .ci/run runs it (make test-heavy)
def test_killed_server_is_restarted_and_the_stage_resumes(prefect_api, format_tuned_model_dir, tmp_path):
    model_dir = _private_copy(format_tuned_model_dir, tmp_path)
    cfg = RLTrainConfig(
        model_path=str(model_dir), out_dir=str(tmp_path), inference="vllm",
        vllm=VLLMConfig(server=VLLMServerConfig(log_dir=str(tmp_path / "vllm"))),
        env=ENV, agent=AGENT.model_copy(update={"sampling": AGENT.sampling.model_copy(update={"temperature": 1.0})}),
        algorithm=GRPOConfig(group_size=4), requests_per_step=2, steps=5, steps_per_stage=5, eval_episodes=0,
        trainer=TrainerConfig(lr=1e-3, checkpoint_every=1, micro_token_budget=8192, max_seq_len=512))
    model, killed = _run_killing_the_server(cfg, model_dir, tmp_path / "checkpoints" / "step_00000002")
    assert "step_00000005" in model
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    steps = [m["step"] for m in metrics]
    assert steps[-1] == 5 and steps.count(1) == 1, steps  # resumed from a checkpoint, not from step 0
    assert [m["policy_version"] for m in metrics if m["step"] == 5] == [5.0]
    logs = sorted((tmp_path / "vllm").glob("server-*.log"))
    assert logs and "Application startup complete" in logs[0].read_text()
    assert not _servers_of(model_dir) and not pid_alive(killed[0])  # restarted, then stopped at the end


@pytest.mark.parametrize("error,calls", [("refused", 1), ("transient", 3)])
def test_refused_pushes_fail_at_once_transient_failures_are_retried(prefect_api, monkeypatch, error, calls):
    """Stage retry policy only (the stage itself is a stand-in): a WeightPushError is
    deterministic, so retrying it would just burn two more full stage attempts."""
    import flows.vllm_inference as vi
    from prefect import flow

    from blocks import InferenceEndpoint
    from ludic_core.stages.run import StageSpec
    from ludic_core.vllm.publisher import WeightPushError

    InferenceEndpoint(kind="vllm", base_url="http://127.0.0.1:9/v1", model_path="policy").save(
        f"retry-{error}", overwrite=True)
    attempts: list[int] = []

    class _Stage:
        def with_options(self, **_):
            return self

        def __call__(self, spec, **_):
            attempts.append(spec.until_step)
            raise WeightPushError("shape mismatch") if error == "refused" else ConnectionError("reset")

    monkeypatch.setattr(vi, "train_stage", _Stage())
    spec = StageSpec.model_validate({"model_path": "m", "checkpoint_dir": "c", "algorithm": {"type": "sft"},
                                     "trainer": {}, "data": {"kind": "rollouts", "env": {"name": "tic_tac_toe"}},
                                     "until_step": 2})

    @flow
    def run() -> None:
        with vi.vllm_inference(VLLMConfig(endpoint_block=f"retry-{error}"), "m",
                               launcher="in_process", nproc=1) as (_, run_one):
            run_one(spec)

    with pytest.raises(WeightPushError if error == "refused" else ConnectionError):
        run()
    assert attempts == [2] * calls


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.heavy  # starts its own server; .ci/run runs it (make test-heavy)
def test_a_lora_run_hot_swaps_adapters_and_a_killed_server_gets_the_resumed_one(prefect_api, format_tuned_model_dir,
                                                                                 tmp_path):
    """A LoRA rl_train run starts a LoRA server and loads each step's adapter into it by
    name (no weight push). Its server is SIGKILLed once step 2 is checkpointed: the flow
    starts a new one, the stage resumes from its checkpoint and loads that checkpoint's
    adapter first, so (max_lag=0) every later item still comes from the trainer's version."""
    from ludic_core.config import LoRAConfig
    from ludic_core.vllm.adapters import read_published

    model_dir = _private_copy(format_tuned_model_dir, tmp_path)
    cfg = RLTrainConfig(
        model_path=str(model_dir), out_dir=str(tmp_path), inference="vllm",
        vllm=VLLMConfig(server=VLLMServerConfig(log_dir=str(tmp_path / "vllm"))),
        env=ENV, agent=AGENT, algorithm=GRPOConfig(group_size=2), requests_per_step=2, steps=4, steps_per_stage=4,
        eval_episodes=0,
        trainer=TrainerConfig(lr=1e-3, max_seq_len=512, lora=LoRAConfig(r=4), max_lag=0, checkpoint_every=1))
    model, killed = _run_killing_the_server(cfg, model_dir, tmp_path / "checkpoints" / "step_00000002")
    assert "step_00000004" in model
    (log,) = (tmp_path / "vllm").glob("server-*.log")  # the restarted server appends to its predecessor's log
    text = log.read_text()
    assert "'enable_lora': True" in text and "'max_lora_rank': 8" in text  # the run's r=4, rounded up
    assert "POST /update_weights" not in text  # adapters only, never a weight push
    starts = text.split(START_MARK)[1:]  # one part per server start, in order
    loads = [[int(line.split("'policy-v")[1].split("'")[0]) for line in part.splitlines()
              if "Loaded new LoRA adapter: name 'policy-v" in line] for part in starts]
    first, second = loads
    assert first[:3] == [0, 1, 2]
    # the new server's first adapter is the resumed checkpoint's; then one per step
    assert second[0] in (2, 3) and second == list(range(second[0], 5)), loads
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]  # resumed from a checkpoint: no step ran twice
    assert [m["stale_dropped"] for m in metrics] == [0.0] * 4  # each step trained on its own adapter's rollouts
    published = read_published(tmp_path / "adapters")  # what the published-adapters artifact lists
    assert [r["name"] for r in published][-1] == "policy-v4"
    assert not _servers_of(model_dir) and not pid_alive(killed[0])
