"""`pipeline_rl` end to end on the embedded default: a real redis-server started
by the flow, two actor rounds in flight, trainer stages consuming the stream,
weights published every step; the run's counts add up."""

import json

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.slow]


def test_pipeline_rl_counts_add_up(prefect_api, format_tuned_model_dir, tmp_path):
    from flows.pipeline_rl import PipelineRLConfig, pipeline_rl
    from ludic_core.config import GRPOConfig, TrainerConfig
    from ludic_core.recipes.tic_tac_toe import RECIPE

    cfg = PipelineRLConfig(
        model_path=str(format_tuned_model_dir), out_dir=str(tmp_path / "run"), env=RECIPE.env, agent=RECIPE.agent,
        algorithm=GRPOConfig(group_size=2), requests_per_round=4, actors=2, steps=4, steps_per_stage=2,
        items_per_step=12, max_lag=2, trainer=TrainerConfig(lr=1e-4, max_seq_len=512), eval_episodes=8)
    out = pipeline_rl(cfg)
    assert out["steps"] == 4 and out["items_trained"] == 4 * 12
    assert out["failed_rounds"] == 0 and out["dead_lettered"] == 0
    # every produced item is trained, dropped as stale, or still waiting in the stream
    assert out["items_produced"] == out["items_trained"] + out["stale_dropped"] + out["left_in_stream"]
    lags = {int(k): v for k, v in json.loads(out["lag_histogram"]).items()}
    assert sum(lags.values()) == 48 and max(lags) <= 2
    # the stage published every step: the actors played more than the starting policy
    policies = sorted(p.name for p in (tmp_path / "run" / "policy").glob("v*"))
    assert policies[-1] == "v00000004"
    assert set(out["eval"]) >= {"mean_return", "X/win_draw_rate"}
