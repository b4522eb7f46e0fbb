"""Smoke tests of the real `ludic` entry point with tiny budgets."""

import subprocess
import sys
from pathlib import Path

from ludic_core.rollout import read_rollouts


def _ludic(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        cwd=Path(__file__).resolve().parents[1], capture_output=True, text=True, timeout=300,
    )


def test_model_tiny_builds_a_loadable_directory(tmp_path):
    res = _ludic("model", "tiny", "--out", str(tmp_path / "m"), cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "m" / "config.json").exists() and (tmp_path / "m" / "model.safetensors").exists()


def test_model_tiny_unknown_preset_is_a_clear_error(tmp_path):
    res = _ludic("model", "tiny", "--out", str(tmp_path / "m"), "--preset", "huge", cwd=tmp_path)
    assert res.returncode == 2 and "unknown tiny model preset 'huge'" in res.stderr


def test_demo_runs_end_to_end_with_a_tiny_budget(tmp_path):
    res = _ludic("demo", "--out", str(tmp_path), "--games", "16", "--group-size", "4", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert "minimax teacher" in res.stdout and "tiny LLM, untrained" in res.stdout
    teacher = read_rollouts(tmp_path / "demo" / "minimax.jsonl")
    assert len(teacher) == 16
    assert all(s.trace.completion_token_ids for r in teacher for s in r.steps)
