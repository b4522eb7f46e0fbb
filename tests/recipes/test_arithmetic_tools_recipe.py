"""The tool-use recipe holds together: half its problems need the calculator, its teacher
calls on a share of them blind to difficulty, answers with the tool's result, and its
episodes become training rows for every model call, the tool-calling turns included."""

import json
import re

import pytest

from ludic_core.envs.arithmetic import ArithmeticEnv, generate_arithmetic_problems, solve_arithmetic_question
from ludic_core.envs.arithmetic_tool_teacher import arithmetic_tool_teacher, calls_tool_on
from ludic_core.recipes.recipe import get_recipe

RECIPE = get_recipe("arithmetic_tools")
_PRODUCT = re.compile(r"buys (\d+) [a-z]+ with (\d+) [a-z]+ in each")


def _questions(n=400, seed=0):
    return [p["question"] for p in generate_arithmetic_problems(n, seed=seed, difficulty="mixed")]


def test_mixed_problems_are_half_two_digit_products_and_the_oracle_solves_them():
    problems = generate_arithmetic_problems(400, seed=0, difficulty="mixed")
    products = [p for p in problems if _PRODUCT.search(p["question"])]
    assert 0.4 <= len(products) / len(problems) <= 0.6
    for p in problems:
        answer = int(p["answer"].rsplit("#### ", 1)[1])
        assert solve_arithmetic_question(p["question"]) == answer
    for p in products:
        a, b = map(int, _PRODUCT.search(p["question"]).groups())
        assert 12 <= a <= 99 and 12 <= b <= 99 and int(p["answer"].rsplit("#### ", 1)[1]) == a * b
    easy = [p for p in problems if not _PRODUCT.search(p["question"])]
    assert all(int(p["answer"].rsplit("#### ", 1)[1]) <= 40 for p in easy)


def test_the_teacher_calls_on_its_share_blind_to_difficulty():
    qs = _questions()
    hard = [q for q in qs if _PRODUCT.search(q)]
    easy = [q for q in qs if not _PRODUCT.search(q)]
    for group in (qs, hard, easy):
        share = sum(calls_tool_on(q, 0.5) for q in group) / len(group)
        assert 0.38 <= share <= 0.62, share
    assert not any(calls_tool_on(q, 0.0) for q in qs) and all(calls_tool_on(q, 1.0) for q in qs)
    with pytest.raises(ValueError, match="tool_rate must be in"):
        arithmetic_tool_teacher(tool_rate=1.5)


def test_the_teacher_calls_then_answers_with_the_tools_result():
    teacher = arithmetic_tool_teacher(tool_rate=0.5)
    q = next(q for q in _questions() if _PRODUCT.search(q) and calls_tool_on(q, 0.5))
    a, b = map(int, _PRODUCT.search(q).groups())
    dialog = [{"role": "user", "content": q}]
    call = teacher(dialog)
    assert call == ('<tool_call>{"name": "calculator", "arguments": {"expression": "%d * %d"}}</tool_call>' % (a, b))
    assert json.loads(call.removeprefix("<tool_call>").removesuffix("</tool_call>"))["name"] == "calculator"
    dialog += [{"role": "assistant", "content": "", "tool_calls": []},
               {"role": "tool", "tool_call_id": "c0", "name": "calculator", "content": str(a * b)}]
    assert teacher(dialog) == f"<answer>{a * b}</answer>"
    # it answers with what the tool said, as a model would
    dialog[-1] = {**dialog[-1], "content": "7"}
    assert teacher(dialog) == "<answer>7</answer>"


def test_without_a_call_the_teacher_shows_its_work_and_the_env_agrees():
    teacher = arithmetic_tool_teacher(tool_rate=0.5)
    env = ArithmeticEnv(**RECIPE.env.kwargs)
    for seed in range(60):
        obs = env.reset(seed=seed)["agent_0"][0]
        reply = teacher([{"role": "user", "content": obs}])
        if calls_tool_on(obs, 0.5):
            assert reply.startswith("<tool_call>") and len(reply.encode()) + 1 <= RECIPE.agent.sampling.max_tokens
            continue
        assert re.fullmatch(r"(\d+ [-+*] \d+ = \d+\n)+<answer>\d+</answer>", reply), reply
        assert env.step({"agent_0": reply.rsplit("<answer>", 1)[1].removesuffix("</answer>")})["agent_0"].reward == 1


def test_the_no_tools_variant_differs_only_in_tools_and_teacher():
    none = get_recipe("arithmetic_tools_none")
    assert none.agent.tools == () and none.teacher_kwargs == {"tool_rate": 0.0}
    assert RECIPE.agent.tools == ("calculator",)
    assert none.env == RECIPE.env and none.eval_env == RECIPE.eval_env and none.sft_steps == RECIPE.sft_steps
    assert none.eval_env.kwargs["seed"] != RECIPE.env.kwargs["seed"]  # held-out problems


def test_rejection_sampling_keeps_every_call_of_a_tool_episode_with_its_ids(tmp_path):
    from ludic_core.agents.tools import function_schema
    from ludic_core.inference.chat_render import chat_prompt_ids, text_ids
    from ludic_core.inference.scripted import ScriptedChatClient
    from ludic_core.models.fingerprint import tokenizer_fingerprint
    from ludic_core.models.tiny import build_byte_tokenizer
    from ludic_core.rejection import load_saw_items, load_sft_items
    from ludic_core.rejection_sampling import rejection_sample
    from ludic_core.saved_dataset import load_saved_dataset
    from ludic_core.tools import calculator

    tok = build_byte_tokenizer()
    client = ScriptedChatClient(arithmetic_tool_teacher(tool_rate=0.5), tok)
    seeds = list(range(24))
    out = rejection_sample(client, RECIPE.env, RECIPE.agent, seeds=seeds, samples=1, keep=RECIPE.keep,
                           out_dir=tmp_path, fingerprint=tokenizer_fingerprint(tok))
    assert out["kept"] == 24  # the teacher is always right
    ds = load_saved_dataset(tmp_path / "dataset")
    env = ArithmeticEnv(**RECIPE.env.kwargs)
    questions = [env.reset(seed=s)["agent_0"][0] for s in seeds]
    calling = sum(calls_tool_on(q, 0.5) for q in questions)
    assert 0 < calling < 24 and len(ds) == 24 + calling  # a calling episode is two rows: the call, the answer
    assert set(ds["tools"]) == {"calculator"}
    calls = [r for r in ds if r["completion_text"].startswith("<tool_call>")]
    assert len(calls) == calling
    for row in calls:
        # the row's ids are the prompt the call was sampled from and the reply as sampled, plus eos
        assert row["completion_token_ids"] == text_ids(tok, row["completion_text"]) + [tok.eos_token_id]
        question = row["messages"][-2]["content"]
        prompt = chat_prompt_ids(tok, [{"role": "user", "content": question}], tools=[function_schema(calculator)])
        assert row["prompt_token_ids"] == prompt
    answers = [r for r in ds if r["messages"][-2]["role"] == "tool"]
    assert len(answers) == calling and all(r["completion_text"] == f"<answer>{r['messages'][-2]['content']}</answer>"
                                           for r in answers)
    assert len(load_saw_items(tmp_path / "dataset")) == len(ds)
    # a student with another tokenizer would train on prompts without the tool schemas: refused
    with pytest.raises(ValueError, match="holds tool-using calls"):
        load_sft_items(tmp_path / "dataset", tok, use="messages")
