"""The bundled recipes' settings hold together: the demo's RL stage takes the
recipe's learning rate and RL env, and the teacher's replies fit the agent's token budget."""

import pytest

from flows.demo import (SETTINGS_FILE, DemoConfig, check_run_dir, rejection_stage, rl_stage, rl_trainer, sft_stage,
                        sft_trainer, stage_settings, teacher)
from ludic_core.envs.arithmetic import arithmetic_oracle, generate_arithmetic_problems
from ludic_core.recipes.recipe import get_recipe


def test_the_demo_trains_rl_at_the_recipes_lr_unless_told_otherwise():
    arithmetic, tic_tac_toe = get_recipe("arithmetic"), get_recipe("tic_tac_toe")
    assert arithmetic.rl_lr != tic_tac_toe.rl_lr
    assert rl_trainer(DemoConfig(recipe="arithmetic"), arithmetic).lr == arithmetic.rl_lr
    assert rl_trainer(DemoConfig(recipe="tic_tac_toe"), tic_tac_toe).lr == tic_tac_toe.rl_lr
    assert rl_trainer(DemoConfig(recipe="arithmetic", rl_lr=3e-4), arithmetic).lr == 3e-4


def _first_move_rewards(env_cfg, seed: int = 1) -> dict[int, tuple[float, float]]:
    """{cell: (regret, reward)} for each legal first move of the agent (O on odd seeds)."""
    from ludic_core.compose.build import env_factory
    from ludic_core.envs.tic_tac_toe import legal_moves, move_regret, parse_observation

    make = env_factory(env_cfg)
    board, mark = parse_observation(make(**env_cfg.kwargs).env_reset(seed=seed)[0])
    out = {}
    for cell in legal_moves(board):
        env = make(**env_cfg.kwargs)
        env.env_reset(seed=seed)
        out[cell] = (move_regret(board, cell, mark), env.env_step(str(cell)).reward)
    return out


def test_tic_tac_toe_rl_trains_on_move_shaping_that_teacher_and_evaluation_do_not_see():
    recipe = get_recipe("tic_tac_toe")
    stage = rl_stage(DemoConfig(), recipe, "runs/sft/model")
    assert stage.env == recipe.rl_env and stage.trainer.lr == recipe.rl_lr
    shaped, teacher, scored = (_first_move_rewards(e) for e in (stage.env, recipe.env, recipe.eval_env))
    assert any(regret > 0 for regret, _ in shaped.values()), "no losing reply to test with"
    for cell, (regret, reward) in shaped.items():
        # the game goes on after one move, so the only reward is the shaping: -0.4 x the move's regret
        assert reward == pytest.approx(-0.4 * regret), cell
        assert teacher[cell][1] == scored[cell][1] == 0.0, cell


def test_tic_tac_toe_rl_reward_leaves_no_cheaper_way_out_than_a_legal_move():
    """RL's reward is per move (the outcome weighs 0, credit per turn with gamma 0), so every
    way of not playing a legal move must cost more than the worst legal move: otherwise a
    policy about to give value away learns to answer garbage or an occupied cell instead."""
    from ludic_core.config import GRPOConfig
    from ludic_core.envs.tic_tac_toe import TicTacToeEnv

    recipe = get_recipe("tic_tac_toe")
    assert isinstance(recipe.rl_algorithm, GRPOConfig)
    assert recipe.rl_algorithm.credit == "turn" and recipe.rl_algorithm.gamma == 0.0
    env = TicTacToeEnv(**recipe.rl_env.kwargs)
    env.env_reset(0)  # X (even seed) on a board where 7 gives the game away and a win weighs nothing
    env._board = "XX.OO...."
    worst_legal = env.env_step("7").reward
    env.env_reset(0)
    env._board = "XX.OO...."
    won = env.env_step("3")
    env.env_reset(0)
    env._board = "XX.OO...."
    illegal = env.env_step("1").reward
    malformed = recipe.agent.parser.kwargs["failure_penalty"]
    assert won.info["result"] == "win" and won.reward == 0.0
    assert max(illegal, malformed) < worst_legal < 0.0, (illegal, malformed, worst_legal)


def test_the_rl_stage_takes_the_recipes_algorithm_and_steps_unless_the_demo_overrides_them():
    from ludic_core.config import GRPOConfig, RolloutReuse

    algorithm = GRPOConfig(group_size=4, credit="turn", reuse=RolloutReuse(mini_batches=2, epochs=2))
    recipe = get_recipe("tic_tac_toe").model_copy(update={"rl_algorithm": algorithm, "rl_steps": 12,
                                                         "rl_requests_per_step": 5})
    stage = rl_stage(DemoConfig(), recipe, "m")
    assert stage.algorithm == algorithm and stage.steps == 12 and stage.steps_per_stage == 6
    assert stage.requests_per_step == 5
    stage = rl_stage(DemoConfig(group_size=6, rl_steps=5), recipe, "m")
    assert stage.algorithm == algorithm.model_copy(update={"group_size": 6}) and stage.steps == 5


def test_the_teacher_data_and_sft_stages_take_the_recipes_episodes_and_batch_unless_the_demo_overrides_them():
    recipe = get_recipe("tic_tac_toe").model_copy(update={"teacher_episodes": 300, "sft_batch_size": 96,
                                                         "sft_steps": 40})
    data = rejection_stage(DemoConfig(run_dir="r"), recipe, "m")
    assert data.prompts == 300 and data.teacher.kwargs == recipe.teacher_kwargs and data.keep == recipe.keep
    assert rejection_stage(DemoConfig(teacher_episodes=7), recipe, "m").prompts == 7
    override = rejection_stage(DemoConfig(teacher_kwargs={"fallback": "centre", "notice": 0.3}), recipe, "m")
    assert override.teacher.kwargs == {**recipe.teacher_kwargs, "fallback": "centre", "notice": 0.3}
    assert teacher(DemoConfig(teacher_kwargs={"fallback": "centre"}), recipe).kwargs["fallback"] == "centre"
    sft = sft_stage(DemoConfig(run_dir="r"), recipe, "m", "r/rejection/dataset")
    assert (sft.batch_size, sft.steps, sft.steps_per_stage, sft.trainer.total_steps) == (96, 40, 10, 40)
    assert sft.dataset_path == "r/rejection/dataset" and sft.out_dir == "r/sft"
    assert sft_stage(DemoConfig(sft_steps=8), recipe, "m", "d").steps == 8


def test_a_run_dir_made_with_other_settings_is_refused_rather_than_reused(tmp_path):
    # The chain reuses a run dir's stage outputs (a crashed run resumes); after an upgrade changes the
    # recipe's defaults, reusing them would report the old run's models as the new settings' results.
    recipe, run = get_recipe("tic_tac_toe"), tmp_path / "run"
    cfg = DemoConfig(run_dir=str(run), seed=3)
    check_run_dir(cfg, recipe, record=False)  # an empty dir: nothing to compare, nothing written
    assert not run.exists()
    check_run_dir(cfg, recipe)
    assert (run / SETTINGS_FILE).exists()
    (run / "sft" / "checkpoints").mkdir(parents=True)  # a stage's output, as a crashed run leaves it
    same = [DemoConfig(run_dir=str(run), seed=3, eval_episodes=10, progress_bar=False),  # not the stages'
            DemoConfig(run_dir=str(run), seed=3, rl_steps=recipe.rl_steps, rl_lr=recipe.rl_lr),  # = the recipe's
            DemoConfig(run_dir=str(run), seed=3, launcher="torchrun")]  # how a stage runs, not what it makes
    for other in same:
        check_run_dir(other, recipe)
    check_run_dir(cfg, recipe.model_copy(update={"eval_seed": 7, "table": {"X": "X/win_draw_rate"}}))  # evaluation
    cfg.preflight()  # the CLI's check before Prefect starts: the same settings pass
    assert "vllm" not in stage_settings(cfg, recipe)["rl"]  # in-process decoding: the server's settings are moot
    upgraded = recipe.model_copy(update={"rl_steps": 99, "teacher_kwargs": {**recipe.teacher_kwargs, "insight": 1.0}})
    changed = rf"rejection\.teacher\.kwargs\.insight: 2\.0 then, 1\.0 now.*rl\.steps: {recipe.rl_steps} then, 99 now"
    with pytest.raises(ValueError, match=changed):
        check_run_dir(cfg, upgraded)
    with pytest.raises(ValueError, match=r"rejection\.teacher\.kwargs\.fallback: 'edges' then, 'centre' now"):
        DemoConfig(run_dir=str(run), seed=3, teacher_kwargs={"fallback": "centre"}).preflight()
    check_run_dir(DemoConfig(run_dir=str(run), seed=3, teacher_kwargs=recipe.teacher_kwargs), recipe)  # = the recipe's
    with pytest.raises(ValueError, match=r"model\.seed: 3 then, 4 now"):
        DemoConfig(run_dir=str(run), seed=4).preflight()
    with pytest.raises(ValueError, match=r"rl\.trainer\.lr: .* then, 0\.001 now"):
        check_run_dir(DemoConfig(run_dir=str(run), seed=3, rl_lr=1e-3), recipe)
    (run / SETTINGS_FILE).write_text('{"demo": {"seed": 3}, "recipe": {}}')  # what 48e1f43-3b34242 recorded
    with pytest.raises(ValueError, match="recorded by an older version"):
        check_run_dir(cfg, recipe)
    (run / SETTINGS_FILE).write_text('{"demo": {"seed"')  # cut short by a crash of an older version
    with pytest.raises(ValueError, match="not readable JSON"):
        check_run_dir(cfg, recipe)
    old = tmp_path / "old"  # a run of a version that recorded no settings
    (old / "sft" / "checkpoints").mkdir(parents=True)
    with pytest.raises(ValueError, match=f"no {SETTINGS_FILE}"):
        check_run_dir(DemoConfig(run_dir=str(old)), recipe)
    early = tmp_path / "early"  # crashed before any stage wrote: nothing to reuse, so new settings are taken
    check_run_dir(DemoConfig(run_dir=str(early), seed=1), recipe)
    check_run_dir(DemoConfig(run_dir=str(early), seed=2), recipe)
    assert '"seed": 2' in (early / SETTINGS_FILE).read_text()


def test_arithmetic_rl_trains_on_the_env_the_teacher_plays():
    recipe = get_recipe("arithmetic")
    assert recipe.rl_env_kwargs == {} and recipe.rl_env == recipe.env
    assert rl_stage(DemoConfig(recipe="arithmetic"), recipe, "m").env == recipe.env


def test_the_arithmetic_teacher_shows_its_work_within_the_agents_token_budget():
    recipe = get_recipe("arithmetic")
    teacher = arithmetic_oracle(**recipe.teacher_kwargs)
    problems = generate_arithmetic_problems(**recipe.env.kwargs)
    replies = [teacher([{"role": "user", "content": p["question"]}]) for p in problems]
    assert all(" = " in r.split("<answer>")[0] for r in replies), "the teacher does not show its work"
    # Byte-level tokenizer: one token per byte, plus the end-of-turn token.
    longest = max(len(r.encode()) + 1 for r in replies)
    assert longest <= recipe.agent.sampling.max_tokens, longest


def test_each_stage_of_the_demo_trains_at_its_recipes_item_length():
    """TextArena's first observation alone makes ~800-token items: that recipe trains at 1024
    (the tiny models' context); the others at the pipelines' 512, which refuses longer items."""
    from ludic_core.config import RL_TRAINER
    from ludic_core.models.tiny import PRESETS

    for name, expected in (("textarena", 1024), ("tic_tac_toe", RL_TRAINER.max_seq_len)):
        recipe, cfg = get_recipe(name), DemoConfig(recipe=name)
        assert recipe.max_seq_len == expected
        assert sft_trainer(cfg, recipe, 10).max_seq_len == rl_trainer(cfg, recipe).max_seq_len == expected
        assert rl_stage(cfg, recipe, "sft-model").trainer.max_seq_len == expected
    assert get_recipe("textarena").max_seq_len <= PRESETS[DemoConfig().preset].max_position_embeddings


def test_a_recipe_takes_any_algorithm_the_rl_stage_takes_and_the_group_override_needs_groups():
    """A recipe names its RL algorithm as rl_train does (by `type`), so a user's recipe (or
    benchmarks/demo_rl.py) can run the demo's RL stage with CISPO or plain REINFORCE; the demo's
    group_size override is refused, naming the algorithm, where there are no groups to size."""
    from ludic_core.config import CISPOConfig, ReinforceConfig
    from ludic_core.recipes.recipe import Recipe

    base = get_recipe("tic_tac_toe")
    data = base.model_dump()
    recipe = Recipe.model_validate({**data, "rl_algorithm": {"type": "cispo", "group_size": 4}})
    assert recipe.rl_algorithm == CISPOConfig(group_size=4)
    assert rl_stage(DemoConfig(group_size=2), recipe, "m").algorithm == CISPOConfig(group_size=2)
    plain = Recipe.model_validate({**data, "rl_algorithm": {"type": "reinforce"}})
    assert isinstance(plain.rl_algorithm, ReinforceConfig)
    assert rl_stage(DemoConfig(), plain, "m").algorithm == plain.rl_algorithm
    with pytest.raises(ValueError, match="group_size 2: the tic_tac_toe recipe's RL algorithm 'reinforce' plays no groups"):
        rl_stage(DemoConfig(group_size=2), plain, "m")
    with pytest.raises(ValueError, match="rl_algorithm"):
        Recipe.model_validate({**data, "rl_algorithm": {"type": "no_such_algorithm"}})
