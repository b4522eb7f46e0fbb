"""`benchmarks/algorithms.py --merge`: runs made one process per seed become one
table; runs that are not comparable are refused by name."""

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "algorithms.py"


def _run(seed: int, scores: dict[int, float], **over) -> dict:
    """A results.json of one seed of grpo on tic-tac-toe, scored at `scores` {step: score}."""
    evals = [{"step": s, "score": v, "metrics": {}} for s, v in sorted(scores.items())]
    cell = {"seed": seed, "steps": max(scores), "train_s": 1.0, "curve": [[1, 0.5], [2, 0.6]],
            "metrics": {}, "score": evals[-1]["score"], "evals": evals}
    rec = {"start": "runs/demo/ttt/model", "sft": 0.8, "sft_metrics": {}, "lr": 5e-5, "temperature": 0.7,
           "cells": {"grpo": [cell]}}
    res = {"budget_s": None, "steps": 4, "seeds": [seed], "sft_steps": None, "warmup_steps": 0,
           "episodes": 64, "env_kwargs": {}, "teacher_episodes": 128, "recipes": {"tic_tac_toe": rec}}
    rec.update(over.pop("recipe", {}))
    res.update(over)
    return res


def _merge(tmp_path: Path, *runs: dict) -> subprocess.CompletedProcess:
    dirs = []
    for i, res in enumerate(runs):
        d = tmp_path / f"seed{i}"
        d.mkdir()
        (d / "results.json").write_text(json.dumps(res))
        dirs.append(str(d))
    return subprocess.run([sys.executable, str(SCRIPT), "--merge", *dirs, "--out", str(tmp_path / "all")],
                          capture_output=True, text=True, timeout=120)


def test_merge_makes_one_table_over_seeds(tmp_path):
    p = _merge(tmp_path, _run(0, {2: 0.85, 4: 0.9}), _run(2, {2: 0.95, 4: 1.0}), _run(1, {2: 0.9, 4: 0.95}))
    assert p.returncode == 0, p.stderr
    rows = [line.split() for line in p.stdout.splitlines() if line.startswith("tic_tac_toe")]
    # final table: mean of 0.9, 0.95, 1.0 over the 0.8 start
    assert ["tic_tac_toe", "grpo", "0.950", "0.900", "1.000", "+0.150", "4.0"] in rows
    # by-step table: step 2 from the three seeds' mid-run scores
    assert ["tic_tac_toe", "grpo", "2", "0.900", "0.850", "0.950", "+0.100", "3"] in rows
    merged = json.loads((tmp_path / "all" / "results.json").read_text())
    assert merged["seeds"] == [0, 1, 2]
    assert [c["seed"] for c in merged["recipes"]["tic_tac_toe"]["cells"]["grpo"]] == [0, 1, 2]
    assert (tmp_path / "all" / "curves.png").stat().st_size > 0


def test_merge_refuses_runs_from_different_starts(tmp_path):
    p = _merge(tmp_path, _run(0, {4: 0.9}), _run(1, {4: 0.9}, recipe={"sft": 0.85}))
    assert p.returncode != 0
    assert "tic_tac_toe has sft=0.85" in p.stderr and "seed1" in p.stderr


def test_merge_refuses_runs_with_different_settings(tmp_path):
    p = _merge(tmp_path, _run(0, {4: 0.9}), _run(1, {4: 0.9}, env_kwargs={"move_shaping": 0.5}))
    assert p.returncode != 0 and "env_kwargs={'move_shaping': 0.5}" in p.stderr


def test_merge_refuses_a_seed_twice(tmp_path):
    p = _merge(tmp_path, _run(0, {4: 0.9}), _run(0, {4: 0.8}))
    assert p.returncode != 0 and "grpo seed 0 is already in an earlier run" in p.stderr


def test_merge_names_a_file_that_is_not_a_results_json(tmp_path):
    p = _merge(tmp_path, {"recipes": {"tic_tac_toe": {"cells": {"grpo": [{}]}}}, "seeds": [0]})
    assert p.returncode != 0
    assert f"{tmp_path / 'seed0' / 'results.json'} is not a results.json" in p.stderr
    assert "Traceback" not in p.stderr


def test_signal_note_reads_the_first_and_last_sixth():
    import importlib.util

    spec = importlib.util.spec_from_file_location("algorithms_benchmark", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    # 12 steps: sixths of 2; the first two average 0.15, the last two 0.45
    signal = [(i + 1, v) for i, v in enumerate([0.1, 0.2] + [0.3] * 8 + [0.4, 0.5])]
    assert mod.signal_note(signal) == "; groups with signal: 0.15 -> 0.45"
    assert mod.signal_note([(1, 0.25)]) == "; groups with signal: 0.25 -> 0.25"
    assert mod.signal_note([]) == ""  # SFT, or an algorithm without groups
