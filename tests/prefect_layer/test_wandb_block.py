"""A flow logs to wandb through a WandbSettings block (offline mode: no network, no key)."""

from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_sft_flow_logs_to_wandb_through_a_block(prefect_api, tiny_model_and_tokenizer, tiny_model_dir, tmp_path,
                                                monkeypatch):
    """Runs after other wandb users in the same process (tests/logging_): the run lands in the
    flow's out_dir, not wherever wandb's process-wide settings point."""
    from blocks import WandbSettings
    from flows.sft import SupervisedFinetuneConfig, sft
    from ludic_core.config import TrainerConfig
    from ludic_core.models import tokenizer_fingerprint
    from ludic_core.recipes.tic_tac_toe import keep_by_reward, teacher_rollouts
    from ludic_core.rejection import rollouts_to_dataset, save_dataset

    _, tok = tiny_model_and_tokenizer
    kept, _ = keep_by_reward(teacher_rollouts(tok, games=8, seed=5), min_reward=1.0)
    data = save_dataset(rollouts_to_dataset(kept, tokenizer=tokenizer_fingerprint(tok)), tmp_path / "data")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    WandbSettings(project="ludic-test", mode="offline").save("offline-wandb", overwrite=True)
    sft(SupervisedFinetuneConfig(model_path=str(tiny_model_dir), dataset_path=str(data), out_dir=str(tmp_path / "sft"),
                                 steps=2, steps_per_stage=2, batch_size=4, trainer=TrainerConfig(lr=1e-3),
                                 wandb_block="offline-wandb"))
    runs = list((tmp_path / "sft" / "wandb").glob("offline-run-*"))  # the run's own directory
    assert len(runs) == 1, list(tmp_path.iterdir())
    assert list(runs[0].glob("*.wandb")), "the run wrote no log"
    steps = [json.loads(line)["step"] for line in (tmp_path / "sft" / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]
    with pytest.raises(ValueError):
        sft(SupervisedFinetuneConfig(model_path=str(tiny_model_dir), dataset_path=str(data),
                                     out_dir=str(tmp_path / "x"), steps=1, wandb_block="no-such-block"))
