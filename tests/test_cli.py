"""Smoke tests of the real `ludic` entry point with tiny budgets."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _ludic(*args: str, home: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(home / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


def test_model_tiny_builds_a_loadable_directory(tmp_path):
    res = _ludic("model", "tiny", "--out", str(tmp_path / "m"), home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "m" / "config.json").exists() and (tmp_path / "m" / "model.safetensors").exists()


def test_model_tiny_unknown_preset_is_a_clear_error(tmp_path):
    res = _ludic("model", "tiny", "--out", str(tmp_path / "m"), "--preset", "huge", home=tmp_path)
    assert res.returncode == 2 and "unknown tiny model preset 'huge'" in res.stderr


def test_run_rejects_a_config_with_a_typo_naming_the_field(tmp_path):
    cfg = tmp_path / "eval.yaml"
    cfg.write_text("model_path: x\ngames_per_mark: 3\ntemprature: 0.5\n")
    res = _ludic("run", "evaluate", "--config", str(cfg), home=tmp_path)
    assert res.returncode == 2 and "temprature" in res.stderr


@pytest.mark.slow
def test_demo_chain_runs_end_to_end_through_prefect(tmp_path):
    res = _ludic("demo", "--out", str(tmp_path / "run"), "--sft-steps", "3", "--rl-steps", "1",
                 "--teacher-games", "32", "--eval-games", "4", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for stage in ("before SFT", "after SFT", "after RL"):
        assert stage in res.stdout
    assert (tmp_path / "run" / "rejection" / "dataset").is_dir()
    assert (tmp_path / "run" / "sft" / "checkpoints" / "step_00000003" / "model" / "model.safetensors").exists()
    assert (tmp_path / "run" / "rl" / "checkpoints" / "step_00000001").is_dir()
