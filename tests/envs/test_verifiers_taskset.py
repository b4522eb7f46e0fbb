"""A verifiers (v1) environment through our rollout engine and trainer, offline:
`vf_local_qa` (next to this file) is a taskset over a local JSONL file with a
rubric and a judge plugin of its own, loaded by verifiers' own loader."""

from __future__ import annotations

import asyncio
import json
import re

import pytest

from ludic_core.agents import Agent
from ludic_core.algorithms import make_grpo
from ludic_core.batching.sources import OfflineBatchSource, RolloutBatchSource
from ludic_core.compose.build import build_engine, check_env, episode_requests
from ludic_core.compose.configs import AgentConfig, EnvConfig
from ludic_core.config import TrainerConfig
from ludic_core.envs.verifiers_taskset import UnsupportedTaskset, VerifiersTasksetEnv, load_tasks
from ludic_core.inference import LocalChatClient, SamplingConfig, ScriptedChatClient
from ludic_core.interaction import SingleAgentSyncProtocol
from ludic_core.registry import ComponentError
from ludic_core.rollout import GRPORequestStrategy
from ludic_core.training.trainer import Trainer

ROWS = [("What is 2 + 3?", 5), ("What is 7 - 9?", -2), ("What is 4 * 3?", 12), ("What is 8 / 2?", 4)]
SYSTEM = "Answer with the number only."


@pytest.fixture(scope="module")
def qa_config(tmp_path_factory):
    path = tmp_path_factory.mktemp("vf-data") / "qa.jsonl"
    path.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in ROWS))
    # the judge plugin by id, at half weight: "a rubric of our own" next to the task's @vf.reward
    return {"path": str(path), "task": {"judges": [{"id": "vf_local_qa", "weight": 0.5}]}}


def _expected(reply: str, answer: int) -> dict[str, float]:
    """The rubric, written out independently: exact match, and the judge's two criteria."""
    judge = (bool(re.fullmatch(r"-?\d+", reply)) + (len(reply) <= 8)) / 2
    return {"correct": float(reply == str(answer)), "vf_local_qa": judge}


def _play(env, reply, seed):
    agent = Agent(ScriptedChatClient(lambda messages: reply))
    return asyncio.run(SingleAgentSyncProtocol(agent).run(env, max_steps=1, env_seed=seed))[0]


def test_the_tasks_own_rubric_and_judge_score_the_reply(qa_config):
    import verifiers.v1 as vf  # here, not at the top: ~10 s of imports every xdist worker's collection would pay

    env = VerifiersTasksetEnv("vf_local_qa", qa_config)
    assert len(env.tasks) == 4 and isinstance(env.tasks[0], vf.Task)
    for seed, reply in [(0, "5"), (1, "-2"), (1, "2"), (2, "the answer is 12"), (6, "12")]:
        r = _play(env, reply, seed)
        question, answer = ROWS[seed % 4]
        assert r.steps[0].prev_obs == question and r.steps[0].info["prompt_messages"][0]["content"] == SYSTEM
        expected = _expected(reply, answer)
        assert r.steps[0].info["rewards"] == expected
        assert r.total_reward == expected["correct"] + 0.5 * expected["vf_local_qa"]  # the trace's weighted total
        assert r.steps[0].info["metrics"] == {"reply_chars": float(len(reply))}
        assert r.steps[0].terminated and not r.failed


def test_an_import_path_loads_the_taskset_class_too(qa_config):
    env = VerifiersTasksetEnv("vf_local_qa:LocalQATaskset", {"path": qa_config["path"]})
    r = _play(env, "5", 4)
    assert r.steps[0].info["rewards"] == {"correct": 1.0}  # no judge plugged here
    with pytest.raises(UnsupportedTaskset, match="not a verifiers.v1.Taskset"):
        load_tasks("vf_local_qa:FormatRubricJudge")


def test_a_failing_judge_fails_its_episode_not_the_batch(qa_config):
    """A judge that raises (here: on an empty reply) is a recorded error on that
    episode, as in verifiers, never a reward of 0; the batch's other episodes are scored."""
    env = EnvConfig(name="verifiers", kwargs={"taskset": "vf_local_qa", "taskset_config": qa_config})
    agent = AgentConfig(max_turns=1)
    replies = {"What is 7 - 9?": ""}
    engine = build_engine(env, agent, ScriptedChatClient(lambda m: replies.get(m[-1]["content"], "5")))
    rollouts = asyncio.run(engine.generate_rollouts(episode_requests(env, agent, range(4)), max_steps=1))
    failed = [r for r in rollouts if r.failed]
    assert [r.meta["env_seed"] for r in failed] == [1]
    assert "nothing to judge" in failed[0].meta["error"] and len(failed[0].steps) == 0
    assert [r.total_reward for r in rollouts if not r.failed] == [1.5, 0.5, 0.5]


def test_unsupported_parts_are_refused_when_the_env_is_built(qa_config):
    import verifiers.v1 as vf

    class BoxTask(vf.Task[vf.TaskData]):
        async def setup(self, trace, runtime):
            await runtime.run(["true"], {})

    class BoxTaskset(vf.Taskset[BoxTask, vf.TasksetConfig]):
        def load(self):
            return [BoxTask(vf.TaskData(prompt="hi"))]

    class RuntimeRewardTask(vf.Task[vf.TaskData]):
        @vf.reward
        async def tests_pass(self, trace, runtime) -> float:
            return 1.0

    class RuntimeRewardTaskset(vf.Taskset[RuntimeRewardTask, vf.TasksetConfig]):
        def load(self):
            return [RuntimeRewardTask(vf.TaskData(prompt="hi"))]

    class FewShotTaskset(vf.Taskset[vf.Task, vf.TasksetConfig]):
        def load(self):
            shots = [vf.UserMessage(content="1+1?"), vf.AssistantMessage(content="2"), vf.UserMessage(content="2+2?")]
            return [vf.Task(vf.TaskData(prompt=shots))]

    globals().update(BoxTaskset=BoxTaskset, RuntimeRewardTaskset=RuntimeRewardTaskset, FewShotTaskset=FewShotTaskset)
    with pytest.raises(UnsupportedTaskset, match="a prompt of 3 messages"):
        load_tasks(f"{__name__}:FewShotTaskset")
    # verifiers' own TextArena taskset plays games in a vf.Env of its own: refused before any task loads
    with pytest.raises(UnsupportedTaskset, match=r"ships its own vf.Env \(TextArenaEnv\)"):
        load_tasks("textarena", {"game": "Wordle-v0"})
    with pytest.raises(UnsupportedTaskset, match="defines `setup`"):
        load_tasks(f"{__name__}:BoxTaskset")
    with pytest.raises(UnsupportedTaskset, match=r"\['tests_pass'\] need a runtime"):
        load_tasks(f"{__name__}:RuntimeRewardTaskset")
    with pytest.raises(ComponentError, match="failed to build"):
        check_env(EnvConfig(name="verifiers", kwargs={"taskset": f"{__name__}:BoxTaskset"}))
    with pytest.raises(ComponentError, match="taskset_confi"):
        check_env(EnvConfig(name="verifiers", kwargs={"taskset": "vf_local_qa", "taskset_confi": {}}))


# -------------------------------------------------------------- the tiny LLM


@pytest.fixture(scope="module")
def answering_model_dir(tiny_model_and_tokenizer, tmp_path_factory, qa_config):
    """The tiny model after a few seconds of cross-entropy on "<answer><eos>" replies
    to the last prompt tokens: it then ends its replies, right or wrong (an untrained
    byte-level model is cut at max_tokens, and a cut reply never reaches the env)."""
    import copy

    import torch

    model, tok = tiny_model_and_tokenizer
    model = copy.deepcopy(model)
    seqs = []
    for question, answer in ROWS:
        text = tok.apply_chat_template([{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
                                       add_generation_prompt=True, tokenize=False)
        prompt = tok.encode(text, add_special_tokens=False)[-16:]
        seqs.append((prompt, tok.encode(str(answer), add_special_tokens=False) + [tok.eos_token_id]))
    width = max(len(p) + len(c) for p, c in seqs)
    ids = torch.tensor([p + c + [tok.pad_token_id] * (width - len(p) - len(c)) for p, c in seqs])
    labels = torch.tensor([[-100] * len(p) + c + [-100] * (width - len(p) - len(c)) for p, c in seqs])
    torch.manual_seed(0)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(30):
        loss = model(input_ids=ids.to(model.device), labels=labels.to(model.device)).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    out = tmp_path_factory.mktemp("models") / "answering"
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_llm_episodes_through_the_engine_and_one_grpo_step(answering_model_dir, qa_config):
    """The real path: rollouts from the tiny LLM in GRPO groups, rewards from the
    taskset's scorer, token traces that are the tokenizer's rendering with the
    engine's log-probs; the trainer trains on exactly those ids (ratio 1 on the
    first step: its log-probs of our tokens equal the sampler's)."""
    from ludic_core.models import load_model_and_tokenizer

    client = LocalChatClient(answering_model_dir, dtype="float32")
    tok = client.tokenizer
    env = EnvConfig(name="verifiers", kwargs={"taskset": "vf_local_qa", "taskset_config": qa_config})
    agent = AgentConfig(sampling=SamplingConfig(temperature=1.0, max_tokens=6), max_turns=1)
    grpo = make_grpo(group_size=4)
    source = RolloutBatchSource(build_engine(env, agent, client), lambda i: episode_requests(env, agent, range(4)),
                                grpo, max_steps=1, strategy=GRPORequestStrategy(4, seed=0), max_seq_len=512)
    batch = source.next_batch()
    rollouts = source.last_rollouts
    assert len(rollouts) == 16 and not any(r.failed for r in rollouts)
    scored = [r for r in rollouts if "rewards" in r.steps[0].info]
    assert len(scored) >= 8  # most replies ended (eos) and reached the rubric
    for r in scored:
        step = r.steps[0]
        answer = ROWS[r.meta["env_seed"] % 4][1]
        expected = _expected(step.action, answer)
        assert step.info["rewards"] == expected
        assert r.total_reward == expected["correct"] + 0.5 * expected["vf_local_qa"]
        text = tok.apply_chat_template(step.info["prompt_messages"], add_generation_prompt=True, tokenize=False)
        assert step.trace.prompt_token_ids == tok.encode(text, add_special_tokens=False)
        assert tok.decode(step.trace.completion_token_ids, skip_special_tokens=True) == step.action
        assert len(step.trace.completion_logprobs) == len(step.trace.completion_token_ids)
    assert any(r.steps[0].info["rewards"]["correct"] == 1.0 for r in scored)  # some answers are right
    traces = {tuple(s.trace.prompt_token_ids + s.trace.completion_token_ids) for r in rollouts for s in r.steps}
    assert batch.items and all(tuple(item.input_ids) in traces for item in batch.items)  # nothing re-tokenised
    model, _ = load_model_and_tokenizer(answering_model_dir)
    trainer = Trainer(model, grpo, OfflineBatchSource(batch.items, batch_size=len(batch.items), seed=0),
                      TrainerConfig(lr=1e-4, micro_token_budget=8192, max_seq_len=512, dtype="float32",
                                    skip_inert=False), tokenizer=tok)
    m = trainer.train_step()
    assert abs(m["ratio_max"] - 1.0) < 1e-3 and abs(m["ratio_min"] - 1.0) < 1e-3, m
