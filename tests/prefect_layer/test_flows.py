"""Flows on the real embedded Prefect API: retries, resume, and skipping done stages."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from flows.rejection_sampling import RejectionSamplingConfig, rejection_sampling
from flows.sft import SupervisedFinetuneConfig, sft
from ludic_core.compose.policy import ScriptedPolicy
from ludic_core.config import TrainerConfig
from ludic_core.recipes.tic_tac_toe import AGENT, ENV
from ludic_core.rejection import KeepRule
from ludic_core.training.schedules import lr_multiplier


def _steps(metrics: Path) -> list[int]:
    return [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.strip()]


def _lrs(metrics: Path) -> list[float]:
    return [json.loads(line)["lr"] for line in metrics.read_text().splitlines() if line.strip()]


def _rs_cfg(student: Path, out: Path, prompts: int) -> RejectionSamplingConfig:
    """The tic-tac-toe recipe's rejection sampling: minimax teacher, wins kept."""
    return RejectionSamplingConfig(
        env=ENV, agent=AGENT, student_path=str(student), out_dir=str(out), prompts=prompts,
        teacher=ScriptedPolicy(policy="tic_tac_toe_minimax", kwargs={"tie_break": "preference"}),
        keep=KeepRule(min_return=1.0))


@pytest.fixture(scope="module")
def dataset(prefect_api, tiny_model_dir, tmp_path_factory):
    return rejection_sampling(_rs_cfg(tiny_model_dir, tmp_path_factory.mktemp("rs"), prompts=24))


def test_transient_rollout_failure_is_retried(prefect_api, tiny_model_dir, tmp_path, monkeypatch):
    import tasks.rollouts as rollouts_task

    real, calls = rollouts_task.sample, []

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            raise ConnectionError("inference server hiccup")
        return real(*args, **kwargs)

    monkeypatch.setattr(rollouts_task, "sample", flaky)
    path = rejection_sampling(_rs_cfg(tiny_model_dir, tmp_path, prompts=8))
    assert len(calls) == 2 and Path(path).is_dir()
    done = json.loads((tmp_path / "done.json").read_text())
    assert done["dataset_path"] == path and done["sampled"] == 8 and done["kept"] >= 1
    assert done["token_ids"] is True  # scripted replies tokenised with the student's tokenizer


def test_rerun_skips_completed_rejection_sampling(prefect_api, tiny_model_dir, tmp_path, monkeypatch):
    cfg = _rs_cfg(tiny_model_dir, tmp_path, prompts=8)
    first = rejection_sampling(cfg)
    import tasks.rollouts as rollouts_task

    monkeypatch.setattr(rollouts_task, "sample", lambda *a, **k: pytest.fail("stage re-ran"))
    assert rejection_sampling(cfg) == first


def _sft_cfg(model: Path, dataset: str, out: Path, **kw) -> SupervisedFinetuneConfig:
    return SupervisedFinetuneConfig(model_path=str(model), dataset_path=dataset, out_dir=str(out), batch_size=8,
                                    trainer=TrainerConfig(lr=1e-3, checkpoint_every=1), **kw)


def test_sft_flow_runs_in_stages_and_a_rerun_skips_them(prefect_api, tiny_model_dir, dataset, tmp_path):
    """Given a dict, as a deployment's run is: its partial `trainer` changes only the
    lr, so the flow's own warmup (10 steps) and cosine decay over `steps` stay, as
    each step's lr shows (TrainerConfig's class defaults would give 1e-3 throughout)."""
    cfg = {"model_path": str(tiny_model_dir), "dataset_path": dataset, "out_dir": str(tmp_path), "batch_size": 8,
           "steps": 4, "steps_per_stage": 2, "trainer": {"lr": 1e-3, "checkpoint_every": 1}}
    model = sft(cfg)
    assert Path(model, "model.safetensors").exists() and "step_00000004" in model
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, 4]
    warmup = lr_multiplier("cosine", warmup_steps=10, total_steps=4)
    assert _lrs(tmp_path / "metrics.jsonl") == pytest.approx([1e-3 * warmup(step) for step in (1, 2, 3, 4)])
    assert sft(cfg) == model  # every stage's checkpoint exists: nothing is trained again
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, 4]


def _stage_workers() -> list[int]:
    """PIDs of torchrun worker ranks running a training stage (not the torchrun agent)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "ludic_core.stages.run" in cmd and "torch.distributed.run" not in cmd:
            pids.append(int(entry.name))
    return pids


@pytest.mark.slow
@pytest.mark.heavy  # 30-40 s on a 2-core host (two torchrun starts); .ci/run runs it
def test_sigkilled_torchrun_stage_is_retried_and_resumes(prefect_api, tiny_model_dir, dataset, tmp_path):
    killed: list[int] = []

    def killer() -> None:  # SIGKILL one rank once step 2's checkpoint exists
        deadline = time.time() + 300
        while time.time() < deadline and not killed:
            if (tmp_path / "checkpoints" / "step_00000002").is_dir():
                for pid in _stage_workers()[:1]:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
            time.sleep(0.05)

    watcher = threading.Thread(target=killer, daemon=True)
    watcher.start()
    model = sft(_sft_cfg(tiny_model_dir, dataset, tmp_path, steps=4, steps_per_stage=4,
                         launcher="torchrun", nproc=2))
    watcher.join(timeout=1)
    assert killed, "the stage finished before it could be killed"
    assert "step_00000004" in model
    steps = _steps(tmp_path / "metrics.jsonl")
    assert steps[-1] == 4 and steps.count(1) == 1, steps  # resumed from a checkpoint, not from step 0
