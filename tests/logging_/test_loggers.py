import json

from ludic_core.logging import JsonlLogger, WandbLogger


def test_jsonl_logger_appends_flushed_lines(tmp_path):
    lg = JsonlLogger(tmp_path / "m.jsonl")
    lg.log(1, {"loss": 0.5, "bad": float("nan")})
    lines = (tmp_path / "m.jsonl").read_text().splitlines()  # readable before close()
    row = json.loads(lines[0])
    assert row["step"] == 1 and row["loss"] == 0.5 and row["bad"] == "nan"
    lg.close()


def test_wandb_logger_offline_writes_a_local_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    lg = WandbLogger("ludic-test", mode="offline", directory=tmp_path, config={"lr": 1e-3})
    lg.log(1, {"loss": 1.0})
    lg.log(2, {"loss": 0.5})
    lg.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1 and list(runs[0].glob("*.wandb"))
