"""Training stages: the unit a pipeline retries (resume, not restart)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ludic_core.compose.configs import BranchConfig
from ludic_core.config import GRPOConfig, SFTConfig, TrainerConfig
from ludic_core.recipes.tic_tac_toe import keep_by_reward, teacher_rollouts
from ludic_core.models import tokenizer_fingerprint
from ludic_core.rejection import load_saw_items, rollouts_to_dataset, save_dataset
from ludic_core.recipes.tic_tac_toe import AGENT, ENV
from ludic_core.stages.run import DatasetData, RolloutData, StageSpec, run_stage

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def dataset(tiny_model_and_tokenizer, tmp_path_factory):
    _, tok = tiny_model_and_tokenizer
    kept, _ = keep_by_reward(teacher_rollouts(tok, games=16, seed=2), min_reward=1.0)
    ds = rollouts_to_dataset(kept, tokenizer=tokenizer_fingerprint(tok))
    return kept, save_dataset(ds, tmp_path_factory.mktemp("ds") / "dataset")


def test_dataset_round_trip_keeps_the_exact_token_ids(dataset):
    kept, path = dataset
    items = load_saw_items(path)
    traces = [s.trace for r in kept for s in r.steps]
    assert len(items) == len(traces)
    for item, t in zip(items, traces):
        assert item.input_ids == t.prompt_token_ids + t.completion_token_ids
        assert sum(item.action_mask) == len(t.completion_token_ids)


def test_empty_or_foreign_dataset_is_a_clear_error(tmp_path):
    from datasets import Dataset

    save_dataset(Dataset.from_dict({"text": ["a"]}), tmp_path / "foreign")
    with pytest.raises(ValueError, match="lacks columns"):
        load_saw_items(tmp_path / "foreign")
    with pytest.raises(ValueError, match="kept nothing"):
        save_dataset(rollouts_to_dataset([]), tmp_path / "empty")
    assert not (tmp_path / "empty").exists()


def test_a_second_stage_resumes_where_the_first_ended(tiny_model_dir, dataset, tmp_path):
    spec = StageSpec(model_path=str(tiny_model_dir), checkpoint_dir=str(tmp_path / "ckpt"),
                     algorithm=SFTConfig(), trainer=TrainerConfig(lr=1e-3),
                     data=DatasetData(path=str(dataset[1]), batch_size=8), until_step=2,
                     metrics_path=str(tmp_path / "m.jsonl"))
    first = run_stage(spec)
    assert first["step"] == 2 and first["resumed_from"] is None and first["steps_run"] == 2
    second = run_stage(spec.model_copy(update={"until_step": 3}))
    assert second["resumed_from"] == 2 and second["steps_run"] == 1 and second["step"] == 3
    assert Path(second["model_path"], "model.safetensors").exists()
    steps = [json.loads(line)["step"] for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3]  # the step counter continued; nothing was redone


def test_rl_stage_trains_on_fresh_rollouts(format_tuned_model_dir, tmp_path):
    spec = StageSpec(model_path=str(format_tuned_model_dir), checkpoint_dir=str(tmp_path / "ckpt"),
                     algorithm=GRPOConfig(group_size=4), trainer=TrainerConfig(lr=1e-4),
                     data=RolloutData(env=ENV, agent=AGENT, requests_per_step=2), until_step=1)
    res = run_stage(spec)
    assert res["step"] == 1 and res["metrics"]["rollouts"] == 8.0 and res["metrics"]["items"] >= 8


def test_rl_stage_branches_at_the_states_its_episodes_reached(format_tuned_model_dir, tmp_path):
    """The spec's `branch` reaches the stage's source (the flows build the same spec)."""
    env = ENV.model_copy(update={"kwargs": {**ENV.kwargs, "move_shaping": 0.4, "outcome_weight": 0.0}})
    spec = StageSpec(model_path=str(format_tuned_model_dir), checkpoint_dir=str(tmp_path / "ckpt"),
                     algorithm=GRPOConfig(group_size=4, credit="turn", gamma=0.0), trainer=TrainerConfig(lr=1e-4),
                     data=RolloutData(env=env, agent=AGENT, requests_per_step=2, branch=BranchConfig(states=3)),
                     until_step=1)
    m = run_stage(spec)["metrics"]
    assert m["rollouts"] == 8.0 and 1 <= m["branch_states"] <= 3 and m["branch_rollouts"] == 4 * m["branch_states"]
    assert m["branch_rollouts_failed"] == 0 and m["branch_episode_len_mean"] == 1.0  # one move each, none failed


def test_stage_spec_rejects_unknown_fields_naming_them():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="learning_rate"):
        StageSpec.model_validate({"model_path": "m", "checkpoint_dir": "c", "algorithm": {"type": "sft"},
                                  "data": {"kind": "dataset", "path": "d"}, "until_step": 1,
                                  "trainer": {"learning_rate": 1.0}})


def test_stage_cli_runs_a_spec_file(tiny_model_dir, dataset, tmp_path):
    spec = StageSpec(model_path=str(tiny_model_dir), checkpoint_dir=str(tmp_path / "ckpt"),
                     algorithm=SFTConfig(), data=DatasetData(path=str(dataset[1]), batch_size=4), until_step=1)
    (tmp_path / "spec.json").write_text(spec.model_dump_json())
    res = subprocess.run([sys.executable, "-m", "ludic_core.stages.run", str(tmp_path / "spec.json"),
                          str(tmp_path / "result.json")], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert res.returncode == 0, res.stderr[-2000:]
    assert json.loads((tmp_path / "result.json").read_text())["step"] == 1
