"""In Prefect's own engine: a stage whose every checkpoint is corrupt runs once, not three
times (a crash is retried: test_flows), and its failure names the checkpoint and file."""

from __future__ import annotations

from prefect import flow
from prefect.client.orchestration import get_client

from ludic_core.config import SFTConfig, TrainerConfig
from ludic_core.stages.run import DatasetData, StageSpec
from tasks.training import train_stage


def test_a_stage_with_no_intact_checkpoint_fails_once_without_retries(prefect_api, tiny_model_dir, tmp_path):
    bad = tmp_path / "ckpt" / "step_00000003"
    bad.mkdir(parents=True)
    (bad / "trainer_state.json").write_text('{"step": -5}')
    spec = StageSpec(model_path=str(tiny_model_dir), checkpoint_dir=str(tmp_path / "ckpt"), algorithm=SFTConfig(),
                     trainer=TrainerConfig(), data=DatasetData(path=str(tmp_path / "unused")), until_step=4)

    @flow(name="corrupt-checkpoint-stage")
    def one_stage() -> dict:  # a plain dict: a returned Failed state would fail the flow itself
        state = train_stage(spec, return_state=True)
        return {"failed": state.is_failed(), "message": state.message, "id": state.state_details.task_run_id}

    outcome = one_stage()
    assert outcome["failed"]
    assert "no intact checkpoint" in outcome["message"] and str(bad) in outcome["message"], outcome["message"]
    with get_client(sync_client=True) as client:
        run = client.read_task_run(outcome["id"])
    assert run.run_count == 1  # retries=2 were not spent on the same bytes
