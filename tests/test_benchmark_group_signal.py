"""`benchmarks/group_signal.py`: the groups a start gives GRPO, counted on real rollouts."""

import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "group_signal.py"


def test_greedy_groups_never_differ_and_sampled_ones_do(tiny_model_dir):
    from ludic_core.recipes.recipe import get_recipe

    spec = importlib.util.spec_from_file_location("group_signal_benchmark", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    greedy, hot = mod.group_signal_table(get_recipe("tic_tac_toe"), str(tiny_model_dir), [0.0, 2.0],
                                         groups=3, group_size=2)
    # temperature 0 ignores the sampling seed: every group is one game twice, so no signal
    assert (greedy["groups"], greedy["differing_groups"], greedy["signal_groups"]) == (3, 0, 0)
    # the untrained model at temperature 2 says something different in every sample
    assert hot["groups"] == 3 and hot["differing_groups"] == 3
    # ... and none of it is a move: every episode ends on the same parse penalty, so still no spread
    assert hot["failed_or_unparsed"] == 1.0 and hot["signal_groups"] == 0
