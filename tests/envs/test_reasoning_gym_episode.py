"""reasoning-gym episodes end to end: the rollout engine, a real tiny model and the
scripted teacher; the reward is reasoning-gym's own score, the traces the tokenizer's;
`evaluate` reports accuracy and pass@k per task."""

import asyncio

import pytest

import reasoning_gym as rg
from ludic_core.compose.build import build_engine, episode_requests
from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.envs.reasoning_gym import reasoning_gym_answer
from ludic_core.envs.reasoning_gym import tasks as rgt
from ludic_core.eval import evaluate_policy
from ludic_core.inference import LocalChatClient, ScriptedChatClient
from ludic_core.inference.sampling import SamplingConfig

MIX = {"tasks": {"basic_arithmetic": 1.0, "gcd": 1.0},
       "config": {"basic_arithmetic": {"min_terms": 2, "max_terms": 2, "max_digits": 1}}, "size": 1000}
ENV = EnvConfig(name="reasoning_gym", kwargs=MIX)
TAGGED = AgentConfig(system_prompt="", parser=ComponentConfig(name="xml_tag", kwargs={"tag": "answer"}),
                     sampling=SamplingConfig(max_tokens=24), max_turns=1)


def _rollouts(client, agent, seeds, temperature=0.0):
    engine = build_engine(ENV, agent, client)
    sampling = agent.sampling.model_copy(update={"temperature": temperature})
    return asyncio.run(engine.generate_rollouts(episode_requests(ENV, agent, seeds, sampling=sampling),
                                                max_steps=agent.max_turns))


def _check_trace(step, tok):
    prompt = tok.apply_chat_template(step.info["prompt_messages"], add_generation_prompt=True, tokenize=False)
    assert step.trace.prompt_token_ids == tok.encode(prompt, add_special_tokens=False)
    ids = step.trace.completion_token_ids
    assert tok.decode(ids, skip_special_tokens=True) == step.action  # byte-level: exact text
    assert ids[-1] == tok.eos_token_id or step.info["finish_reason"] == "length"


def _rg_score(mix_kwargs, task, index, answer):
    """reasoning-gym's own scorer on its own entry, built here from the env's documented seeds."""
    seed = rgt.dataset_seed(mix_kwargs.get("seed", 0), task)
    ds = rg.create_dataset(task, **mix_kwargs["config"].get(task, {}), seed=seed, size=mix_kwargs["size"])
    return ds.score_answer(answer, ds[index]), ds[index]


def test_a_tiny_models_episodes_are_scored_by_reasoning_gym(format_tuned_model_dir):
    # the tic-tac-toe format-tuned model stops after a short reply; the identity parser hands
    # its whole text to the env, so every episode that stopped reaches reasoning-gym's scorer
    client = LocalChatClient(format_tuned_model_dir)
    agent = TAGGED.model_copy(update={"parser": ComponentConfig(name="identity")})
    rollouts = _rollouts(client, agent, range(32), temperature=1.0)
    scored = [r for r in rollouts if "score" in r.steps[0].info]
    assert len(rollouts) == 32 and not any(r.failed for r in rollouts) and len(scored) >= 6
    for r in rollouts:
        (step,) = r.steps
        _check_trace(step, client.tokenizer)
        assert r.meta["reset_info"]["task"] in MIX["tasks"]
    for r in scored:
        step, reset = r.steps[0], r.meta["reset_info"]
        expected, entry = _rg_score(MIX, reset["task"], reset["index"], step.action.strip())
        assert step.prev_obs == entry["question"] and step.info["reference"] == entry["answer"]
        assert r.total_reward == step.info["score"] == expected


def test_the_teacher_plays_through_the_engine_with_the_students_token_ids(tiny_model_and_tokenizer):
    _, tok = tiny_model_and_tokenizer
    teacher = ScriptedChatClient(reasoning_gym_answer(**MIX), tok)
    rollouts = _rollouts(teacher, TAGGED, range(40))
    assert {r.meta["reset_info"]["task"] for r in rollouts} == set(MIX["tasks"])
    for r in rollouts:
        (step,) = r.steps
        assert r.total_reward == step.info["score"] == 1.0
        _check_trace(step, tok)
        assert step.action == f"<answer>{step.info['reference']}</answer>"


def test_evaluate_reports_accuracy_and_pass_at_k_per_task():
    def half_right(messages):  # right on basic_arithmetic, no answer tag (a parse error) on gcd
        question = messages[-1]["content"]
        return teacher(messages) if question.startswith("Calculate") else "I do not know"

    teacher = reasoning_gym_answer(**MIX)
    m = evaluate_policy(ScriptedChatClient(half_right), ENV, TAGGED, seeds=range(30), samples=2)
    assert m["basic_arithmetic/accuracy"] == 1.0 and m["gcd/accuracy"] == 0.0
    assert m["basic_arithmetic/pass@2"] == 1.0 and m["gcd/pass@2"] == 0.0 and m["gcd/pass@1"] == 0.0
    assert m["basic_arithmetic/episodes"] + m["gcd/episodes"] == 60 and m["gcd/episodes"] > 10
    assert m["accuracy"] == pytest.approx(m["basic_arithmetic/episodes"] / 60)
    assert m["parse_error_rate"] == pytest.approx(m["gcd/episodes"] / 60)  # the gcd replies never reached the env
