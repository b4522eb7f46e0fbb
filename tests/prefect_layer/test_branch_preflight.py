"""rl_train's and pipeline_rl's preflight refuse a branching they cannot run, before any stage."""

import pytest

from ludic_core.compose.configs import BranchConfig, EnvConfig
from ludic_core.recipes.tic_tac_toe import ENV


def test_the_flows_refuse_a_branch_they_cannot_run_before_any_stage(tiny_model_dir):
    from flows.pipeline_rl import PipelineRLConfig
    from flows.rl_train import RLTrainConfig
    from ludic_core.config import GRPOConfig, ReinforceConfig

    for config in (RLTrainConfig, PipelineRLConfig):
        ok = config(model_path=str(tiny_model_dir), env=ENV, algorithm=GRPOConfig(group_size=2),
                    branch=BranchConfig(states=4))
        ok.preflight()
        with pytest.raises(ValueError, match="'arithmetic' cannot branch"):
            ok.model_copy(update={"env": EnvConfig(name="arithmetic")}).preflight()
        with pytest.raises(ValueError, match="draws none"):
            ok.model_copy(update={"algorithm": ReinforceConfig()}).preflight()
