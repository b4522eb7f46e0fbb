"""A pipeline actor draws as the synchronous stage does, branching included."""

from ludic_core.batching.branching import BranchingBatchSource
from ludic_core.compose.configs import BranchConfig
from ludic_core.config import GRPOConfig
from ludic_core.publish.directory import point_latest
from ludic_core.queue.actor import ActorSpec, _source
from ludic_core.recipes.tic_tac_toe import RECIPE


def test_an_actor_spec_with_branch_draws_branches(format_tuned_model_dir, tmp_path):
    point_latest(str(tmp_path / "policy"), format_tuned_model_dir, 0)
    algorithm = GRPOConfig(group_size=2, credit="turn", gamma=0.0)
    spec = ActorSpec(env=RECIPE.rl_env, agent=RECIPE.agent, algorithm=algorithm,
                     requests_per_round=2, url="redis://127.0.0.1:1/0", policy_dir=str(tmp_path / "policy"),
                     max_seq_len=512, branch=BranchConfig(states=2))
    source, version, _ = _source(spec, 0)
    assert isinstance(source, BranchingBatchSource) and source.states == 2 and version == 0
    batch = source.next_batch()
    assert 1 <= batch.meta["branch_states"] <= 2 and batch.meta["branch_rollouts"] == 2 * batch.meta["branch_states"]
    # one move each, none failed
    assert batch.meta["branch_rollouts_failed"] == 0 and batch.meta["branch_episode_len_mean"] == 1.0
    assert not isinstance(_source(spec.model_copy(update={"branch": None}), 0)[0], BranchingBatchSource)
