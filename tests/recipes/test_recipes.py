"""The bundled recipes' settings hold together: the demo's RL stage takes the
recipe's learning rate, and the teacher's replies fit the agent's token budget."""

from flows.demo import DemoConfig, rl_trainer
from ludic_core.envs.arithmetic import arithmetic_oracle, generate_arithmetic_problems
from ludic_core.recipes.recipe import get_recipe


def test_the_demo_trains_rl_at_the_recipes_lr_unless_told_otherwise():
    arithmetic, tic_tac_toe = get_recipe("arithmetic"), get_recipe("tic_tac_toe")
    assert arithmetic.rl_lr != tic_tac_toe.rl_lr
    assert rl_trainer(DemoConfig(recipe="arithmetic"), arithmetic).lr == arithmetic.rl_lr
    assert rl_trainer(DemoConfig(recipe="tic_tac_toe"), tic_tac_toe).lr == tic_tac_toe.rl_lr
    assert rl_trainer(DemoConfig(recipe="arithmetic", rl_lr=3e-4), arithmetic).lr == 3e-4


def test_the_arithmetic_teacher_shows_its_work_within_the_agents_token_budget():
    recipe = get_recipe("arithmetic")
    teacher = arithmetic_oracle(**recipe.teacher_kwargs)
    problems = generate_arithmetic_problems(**recipe.env.kwargs)
    replies = [teacher([{"role": "user", "content": p["question"]}]) for p in problems]
    assert all(" = " in r.split("<answer>")[0] for r in replies), "the teacher does not show its work"
    # Byte-level tokenizer: one token per byte, plus the end-of-turn token.
    longest = max(len(r.encode()) + 1 for r in replies)
    assert longest <= recipe.agent.sampling.max_tokens, longest
