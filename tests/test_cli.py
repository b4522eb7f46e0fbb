"""Smoke tests of the real `ludic` entry point with tiny budgets."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from flows.cli import FLOWS

ROOT = Path(__file__).resolve().parents[1]


def _ludic(*args: str, home: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PREFECT_HOME": str(home / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    return subprocess.run([sys.executable, "-m", "flows.cli", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_model_tiny_builds_a_loadable_directory(tmp_path):
    res = _ludic("model", "tiny", "--out", str(tmp_path / "m"), home=tmp_path)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "m" / "config.json").exists() and (tmp_path / "m" / "model.safetensors").exists()


def test_model_tiny_unknown_preset_is_a_clear_error(tmp_path):
    res = _ludic("model", "tiny", "--out", str(tmp_path / "m"), "--preset", "huge", home=tmp_path)
    assert res.returncode == 2 and "unknown tiny model preset 'huge'" in res.stderr


def test_run_rejects_a_config_with_a_typo_naming_the_field(tmp_path):
    cfg = tmp_path / "eval.yaml"
    cfg.write_text("policy: {kind: model, model_path: x}\nenv: {name: tic_tac_toe}\nepisodes: 3\n"
                   "temprature: 0.5\n")
    res = _ludic("run", "evaluate", "--config", str(cfg), home=tmp_path)
    assert res.returncode == 2 and "temprature" in res.stderr, res.stderr


def test_run_with_a_missing_model_fails_fast_naming_the_field(tmp_path):
    """preflight() runs before Prefect: the error names the field and the path, the
    exit code is 2, and no Prefect API (no SQLite database) was ever started."""
    missing = tmp_path / "no-such-model"
    dataset = tmp_path / "data.jsonl"
    dataset.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    cfg = tmp_path / "sft.yaml"
    cfg.write_text(yaml.safe_dump({"model_path": str(missing), "dataset_path": str(dataset),
                                   "out_dir": str(tmp_path / "out")}))
    t0 = time.perf_counter()
    res = _ludic("run", "sft", "--config", str(cfg), home=tmp_path, timeout=120)
    elapsed = time.perf_counter() - t0
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "model_path" in res.stderr and str(missing) in res.stderr, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    assert not list((tmp_path / "prefect-home").rglob("*.db")), "a Prefect database was created"
    assert not (tmp_path / "out").exists()
    assert elapsed < 10, f"took {elapsed:.1f} s: something heavier than preflight ran"


@pytest.mark.parametrize("flow", sorted(FLOWS))
def test_run_example_parses_back_into_the_flow_config(tmp_path, flow):
    from flows.cli import load_flow
    from flows.examples import _examples

    res = _ludic("run", flow, "--example", home=tmp_path, timeout=120)
    assert res.returncode == 0, res.stderr
    assert res.stdout.startswith(f"# ludic run {flow} --config")
    _, cfg_cls = load_flow(flow)
    cfg = cfg_cls.model_validate(yaml.safe_load(res.stdout))
    assert cfg == _examples()[flow]
    # every field of the config model is written out, with its description as a comment
    for name, field in cfg_cls.model_fields.items():
        assert f"\n{name}:" in res.stdout, name
        if field.description:
            assert f"# {field.description}\n{name}:" in res.stdout, name


def test_demo_recipe_choices(tmp_path):
    from flows.cli import build_parser
    from ludic_core.recipes.recipe import RECIPES

    demo = next(a for a in build_parser()._subparsers._group_actions[0].choices["demo"]._actions
                if a.dest == "recipe")
    assert tuple(demo.choices) == RECIPES
    res = _ludic("demo", "--recipe", "chess", home=tmp_path, timeout=120)
    assert res.returncode == 2 and "invalid choice: 'chess'" in res.stderr, res.stderr
    for name in RECIPES:
        assert name in res.stderr, res.stderr
    assert not (tmp_path / "prefect-home").exists() or not list((tmp_path / "prefect-home").rglob("*.db"))


@pytest.mark.slow
def test_demo_chain_runs_end_to_end_through_prefect(tmp_path):
    res = _ludic("demo", "--out", str(tmp_path / "run"), "--sft-steps", "3", "--rl-steps", "1",
                 "--teacher-episodes", "32", "--eval-episodes", "4", home=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    for stage in ("before SFT", "after SFT", "after RL"):
        assert stage in res.stdout
    for column in ("X legal", "X win+draw", "O legal", "O win+draw"):  # the tic-tac-toe recipe's table
        assert column in res.stdout, res.stdout[-3000:]
    assert (tmp_path / "run" / "rejection" / "dataset").is_dir()
    assert (tmp_path / "run" / "sft" / "checkpoints" / "step_00000003" / "model" / "model.safetensors").exists()
    assert (tmp_path / "run" / "rl" / "checkpoints" / "step_00000001").is_dir()
