"""A corrupt checkpoint in a run: the stage resumes from the previous one, and a run
whose every checkpoint is corrupt fails at once, is named, and is not retried.

The Prefect engine's own retry loop is exercised in
tests/prefect_layer/test_corrupt_checkpoint_retries.py (it needs the API server);
here the real `train-stage` task's retry condition is asked with real states.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest
from prefect.states import Failed

from ludic_core.config import SFTConfig, TrainerConfig
from ludic_core.models import tokenizer_fingerprint
from ludic_core.recipes.tic_tac_toe import keep_by_reward, teacher_rollouts
from ludic_core.rejection import rollouts_to_dataset, save_dataset
from ludic_core.training.checkpoint_integrity import CheckpointCorrupt
from ludic_core.stages.run import DatasetData, StageSpec, run_stage
from tasks.training import train_stage


@pytest.fixture(scope="module")
def dataset(tiny_model_and_tokenizer, tmp_path_factory) -> Path:
    _, tok = tiny_model_and_tokenizer
    kept, _ = keep_by_reward(teacher_rollouts(tok, games=8, seed=2), min_reward=1.0)
    return save_dataset(rollouts_to_dataset(kept, tokenizer=tokenizer_fingerprint(tok)),
                        tmp_path_factory.mktemp("ds") / "dataset")


def _spec(model_dir: Path, dataset: Path, ckpt: Path, until: int, metrics: Path) -> StageSpec:
    return StageSpec(model_path=str(model_dir), checkpoint_dir=str(ckpt), algorithm=SFTConfig(),
                     trainer=TrainerConfig(lr=1e-3, checkpoint_every=1), until_step=until,
                     data=DatasetData(path=str(dataset), batch_size=4), metrics_path=str(metrics))


def test_a_stage_resumes_past_a_corrupt_latest_checkpoint_and_replaces_it(tiny_model_dir, dataset, tmp_path,
                                                                           caplog):
    ckpt, metrics = tmp_path / "ckpt", tmp_path / "m.jsonl"
    run_stage(_spec(tiny_model_dir, dataset, ckpt, 2, metrics))
    weights = ckpt / "step_00000002" / "model" / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-400:-300] = b"\xff" * 100  # the case: NaN weights in a well-formed file
    weights.write_bytes(bytes(data))
    caplog.set_level(logging.WARNING, logger="ludic_core")
    second = run_stage(_spec(tiny_model_dir, dataset, ckpt, 3, metrics))
    assert second["resumed_from"] == 1 and second["steps_run"] == 2 and second["step"] == 3
    assert any("model/model.safetensors" in r.getMessage() and "step_00000002" in r.getMessage()
               for r in caplog.records if r.levelno == logging.WARNING)
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines()]
    assert steps == [1, 2, 2, 3]  # step 2 was redone from step 1's state, not from step 0
    from ludic_core.training.checkpoint_integrity import check

    for step in (1, 2, 3):  # the corrupt step 2 was rewritten by the redone step
        assert check(ckpt / f"step_{step:08d}")["step"] == step


def test_a_stage_with_no_intact_checkpoint_fails_naming_them_and_never_starts_at_step_0(tiny_model_dir, tmp_path):
    ckpt = tmp_path / "ckpt"
    bad = ckpt / "step_00000004"
    bad.mkdir(parents=True)
    (bad / "trainer_state.json").write_text('{"step": "x"}')
    spec = _spec(tiny_model_dir, tmp_path / "absent-dataset", ckpt, 5, tmp_path / "m.jsonl")
    with pytest.raises(CheckpointCorrupt, match=r"no intact checkpoint.*step_00000004.*manifest\.json"):
        run_stage(spec)
    assert sorted(p.name for p in ckpt.iterdir()) == ["step_00000004"]  # nothing trained, nothing written


def test_the_train_stage_task_retries_a_crash_but_not_a_corrupt_checkpoint():
    retry = train_stage.retry_condition_fn
    assert retry is not None
    assert not retry(train_stage, None, Failed(data=CheckpointCorrupt("checkpoint /x is corrupt: rng.safetensors")))
    assert retry(train_stage, None, Failed(data=RuntimeError("torchrun stage exited with code 1")))
    assert retry(train_stage, None, Failed(data=ConnectionError("vLLM went away")))


def test_a_torchrun_ranks_corrupt_report_is_read_back_as_the_same_message():
    from ludic_core.training.checkpoint_integrity import CORRUPT_MARKER
    from ludic_core.stages.launch import corrupt_reports

    message = 'no intact checkpoint in /run/ckpt: checkpoint /run/ckpt/step_00000002 is corrupt: "x"'
    line = "[rank0]: " + CORRUPT_MARKER + json.dumps(message) + "\n"
    assert corrupt_reports(line) == [message]
    assert corrupt_reports("[rank0]: Traceback (most recent call last):") == []
