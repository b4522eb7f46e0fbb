"""Tool-using turns reach the trainer exactly as sampled (issue 57, item 3).

A three-call tool episode (a tool call, its result, another tool call, its result, the
answer) goes through `ToolAgent`, the interaction protocol and `build_saw_batch`, and
every SAW item is checked position by position against what the client returned for
that call, recorded as it came back (never recomputed): the completion ids are the
sampled ids, `action_mask` is 1 exactly there, `actor_logprobs` are the sampler's there
and 0.0 elsewhere, tool outputs and env observations lie only under mask 0, and the
prompt-continuation meta says what an independent comparison of the traces says.

Backends: the scripted client (byte tokenizer, no log-probs); the in-process local
client and a real CPU vLLM server, both running the tiny model after a few seconds of
cross-entropy on the scripted episode's completions ("tool-tuned"), so that they emit
the tool calls themselves by real decoding: no forced or prefix decoding exists in
either backend, and an untrained byte-level model never writes a parsable tool call.
Greedy runs must replay the whole three-call episode; seeded T=1 runs are checked the
same way for whatever they sampled.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any, Mapping

import pytest

from ludic_core.agents import ToolAgent
from ludic_core.agents.tools import extract_tool_calls
from ludic_core.batching.saw import SAWBatch, SAWItem, build_saw_batch
from ludic_core.envs.single_agent import SingleAgentEnv
from ludic_core.inference import ScriptedChatClient
from ludic_core.inference.chat_render import text_ids
from ludic_core.inference.sampling import ChatCompletionRequest, InferenceSpec, SamplingConfig
from ludic_core.interaction import SingleAgentSyncProtocol
from ludic_core.parsers import xml_tag_parser
from ludic_core.types import ChatResponse, Rollout, StepOutcome

# ---------------------------------------------------------------- the episode


def add(a: int, b: int) -> str:
    """Add two integers.

    Args:
        a: first addend
        b: second addend
    """
    return f"TOOL-OUT add={a + b}"


def mul(a: int, b: int) -> str:
    """Multiply two integers.

    Args:
        a: first factor
        b: second factor
    """
    return f"TOOL-OUT mul={a * b}"


def call(name: str, **arguments: Any) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


#: (question, answer, the three replies: tool call, tool call, final answer)
QUESTIONS = [
    ("Compute (2 + 3) * 4 with the tools, then reply <answer>N</answer>.", "20",
     [call("add", a=2, b=3), call("mul", a=5, b=4), "<answer>20</answer>"]),
    ("Now compute (7 + 1) * 3 the same way.", "24",
     [call("add", a=7, b=1), call("mul", a=8, b=3), "<answer>24</answer>"]),
]
#: the same episode with prose before each tool call: ToolAgent stores the turn with the
#: blocks moved to "tool_calls" and the prose stripped, so the template re-renders it
PROSE = [(q, a, [f"I will use {json.loads(r[11:-12])['name']}.\n{r}" if r.startswith("<tool_call>") else r
                 for r in replies])
         for q, a, replies in QUESTIONS]


class ToolQuestions(SingleAgentEnv):
    """Asks its questions in turn; an answer is right when it equals the expected one."""

    def __init__(self, questions: list[tuple[str, str, list[str]]]) -> None:
        super().__init__()
        self.questions = questions
        self.i = 0

    def env_reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        self.i = 0
        return self.questions[0][0], {}

    def env_step(self, action: str) -> StepOutcome:
        right = action.strip() == self.questions[self.i][1]
        self.i += 1
        done = self.i == len(self.questions)
        obs = None if done else f"{'Right' if right else 'Wrong'}. {self.questions[self.i][0]}"
        return StepOutcome(obs=obs, reward=float(right), terminated=done)


def script(questions: list[tuple[str, str, list[str]]]):
    """The scripted policy: question k's reply n, n = assistant turns since the last user turn."""

    def policy(messages: list[dict[str, Any]]) -> str:
        k = sum(m["role"] == "user" for m in messages) - 1
        last_user = max(i for i, m in enumerate(messages) if m["role"] == "user")
        n = sum(m["role"] == "assistant" for m in messages[last_user:])
        return questions[k][2][n]

    return policy


# ---------------------------------------------------------------- recording and running


@dataclass(frozen=True)
class Sampled:
    """One model call as the client returned it (copied on return)."""

    prompt: list[int]
    completion: list[int]
    logprobs: list[float] | None
    text: str
    finish_reason: str | None
    tool_calls: list[dict[str, Any]] | None


class Recording:
    """Delegates to `inner` and keeps a copy of every response."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: list[Sampled] = []

    async def complete(self, request: ChatCompletionRequest) -> tuple[ChatResponse, dict[str, Any]]:
        resp, info = await self.inner.complete(request)
        self.calls.append(Sampled(list(resp.prompt_token_ids), list(resp.completion_token_ids),
                                  None if resp.completion_logprobs is None else list(resp.completion_logprobs),
                                  resp.text, resp.finish_reason,
                                  None if resp.tool_calls is None else json.loads(json.dumps(resp.tool_calls))))
        return resp, info

    def sync_weights(self, params: Mapping[str, Any], *, version: int) -> int:
        return self.inner.sync_weights(params, version=version)


@dataclass
class Episode:
    rollout: Rollout
    batch: SAWBatch
    calls: list[Sampled]


def run_episode(client: Any, questions, *, temperature: float = 0.0, seed: int | None = 0,
                max_tokens: int = 96) -> Episode:
    rec = Recording(client)
    agent = ToolAgent(rec, tools=[add, mul], parser=xml_tag_parser("answer"),
                      inference=InferenceSpec(sampling=SamplingConfig(temperature=temperature,
                                                                      max_tokens=max_tokens)))
    protocol = SingleAgentSyncProtocol(agent, system_prompt="You are a careful calculator.")
    rollouts = asyncio.run(protocol.run(ToolQuestions(questions), max_steps=2 * len(questions),
                                        sampling_seed=seed))
    assert len(rollouts) == 1
    batch = build_saw_batch(rollouts, [[1.0] * len(r.steps) for r in rollouts])
    return Episode(rollouts[0], batch, rec.calls)


# ---------------------------------------------------------------- the checks


def occurrences(seq: list[int], sub: list[int]) -> list[int]:
    n = len(sub)
    return [i for i in range(len(seq) - n + 1) if seq[i:i + n] == sub]


def exactness_problems(item: SAWItem, sampled: Sampled, masked: list[list[int]] = ()) -> list[str]:
    """Everything in which `item` differs from the call it should hold; [] when exact.

    `masked`: id sequences (tool outputs, env observations) that may only lie in the prompt."""
    problems: list[str] = []
    p, c = len(sampled.prompt), len(sampled.completion)
    n = len(item.input_ids)
    if n != p + c:
        problems.append(f"{n} ids for a {p}-id prompt and a {c}-id completion")
    if item.input_ids[:p] != sampled.prompt:
        problems.append("input_ids do not start with the sampled prompt")
    if item.input_ids[p:] != sampled.completion:
        problems.append("input_ids after the prompt are not the sampled completion")
    bad = [i for i in range(n) if item.action_mask[i] != int(i >= p)]
    if bad:
        problems.append(f"action_mask wrong at positions {bad[:8]}")
    if item.attention_mask != [1] * n:
        problems.append("attention_mask is not all ones")
    if sampled.logprobs is None:
        if item.actor_logprobs is not None:
            problems.append("actor_logprobs present but the sampler returned none")
    elif item.actor_logprobs is None:
        problems.append("actor_logprobs missing")
    else:
        off = [i for i in range(min(p, n)) if item.actor_logprobs[i] != 0.0]
        on = [i for i in range(p, n) if item.actor_logprobs[i] != sampled.logprobs[i - p]]
        if off or on:
            problems.append(f"actor_logprobs wrong off-action at {off[:8]}, on-action at {on[:8]}")
    for sub in masked:
        trained = [i for i in occurrences(item.input_ids, sub) if any(item.action_mask[i:i + len(sub)])]
        if trained:
            problems.append(f"masked text {sub[:6]}... lies under action_mask 1 at {trained}")
    return problems


FIRST = "first"


def expected_continuation(calls: list[Sampled]) -> list[int | str | None]:
    """Per call: FIRST for the first, None when its prompt starts with the previous call's
    prompt + completion, else the first index where it differs."""
    out: list[int | str | None] = [FIRST]
    for prev, cur in zip(calls, calls[1:]):
        full = prev.prompt + prev.completion
        n = 0
        while n < min(len(full), len(cur.prompt)) and full[n] == cur.prompt[n]:
            n += 1
        out.append(None if n == len(full) else n)
    return out


def check_episode(ep: Episode, tok: Any) -> list[int | str | None]:
    """Every check of the module docstring; returns the expected continuation per call."""
    calls, items = ep.calls, ep.batch.items
    assert calls and all(c.completion for c in calls)
    assert len(items) == len(calls), (len(items), len(calls))
    tool_outputs = [rec.get("result") or rec.get("error") for s in ep.rollout.steps
                    for rec in s.info.get("tool_calls", [])]
    observations = [s.prev_obs for s in ep.rollout.steps if s.prev_obs]
    masked = [text_ids(tok, t) for t in tool_outputs + observations]
    for k, (item, sampled) in enumerate(zip(items, calls)):
        assert exactness_problems(item, sampled, masked) == [], (k, exactness_problems(item, sampled, masked))
    # a tool's output is in the prompt of the calls after it (never trained on: checked above)
    for out in set(tool_outputs):
        assert any(occurrences(c.prompt, text_ids(tok, out)) for c in calls[1:]), out
    # the parsed tool calls are those written in the sampled text (and in the backend's list, if any)
    for sampled in calls:
        from_text = extract_tool_calls(ChatResponse(text=sampled.text))
        if sampled.tool_calls:
            from_backend = extract_tool_calls(ChatResponse(text="", tool_calls=sampled.tool_calls))
            assert [(c.name, c.arguments) for c in from_backend] == [(c.name, c.arguments) for c in from_text]
    ran = [(r["name"], r["arguments"]) for s in ep.rollout.steps for r in s.info.get("tool_calls", [])]
    written = [(c.name, c.arguments) for s in calls if s.finish_reason != "length"
               for c in extract_tool_calls(ChatResponse(text=s.text, tool_calls=s.tool_calls))]
    assert ran == written[:len(ran)]
    # the continuation meta, against an independent comparison of the traces
    expected = expected_continuation(calls)
    for item, exp in zip(items, expected):
        if exp == FIRST:
            assert "prompt_continues" not in item.meta and "prompt_diverges_at" not in item.meta
        elif exp is None:
            assert item.meta["prompt_continues"] is True and "prompt_diverges_at" not in item.meta
        else:
            assert item.meta["prompt_continues"] is False and item.meta["prompt_diverges_at"] == exp
    assert ep.batch.meta["prompts_not_continuing"] == sum(isinstance(e, int) for e in expected)
    return expected


def check_replays_script(ep: Episode, questions) -> None:
    """The whole scripted episode happened: three calls per question, the script's texts."""
    assert [c.text for c in ep.calls] == [r for _, _, replies in questions for r in replies]
    assert [s.info.get("tool_rounds") for s in ep.rollout.steps] == [2] * len(questions)
    assert ep.rollout.total_reward == len(questions)


# ---------------------------------------------------------------- a. scripted client


@pytest.fixture(scope="module")
def byte_tokenizer():
    from ludic_core.models.tiny import build_byte_tokenizer

    return build_byte_tokenizer()


def test_scripted_three_call_episodes_are_items_exactly_as_sampled(byte_tokenizer):
    tok = byte_tokenizer
    ep = run_episode(ScriptedChatClient(script(QUESTIONS), tok), QUESTIONS)
    check_replays_script(ep, QUESTIONS)
    assert len(ep.batch) == 6 and all(c.logprobs is None for c in ep.calls)
    assert not ep.batch.has_actor_logprobs and all(i.actor_logprobs is None for i in ep.batch.items)
    assert all(c.completion[-1] == tok.eos_token_id for c in ep.calls)
    expected = check_episode(ep, tok)
    # Hermes-only replies: the template writes back exactly the blocks and the <|im_end|>
    # the model sampled, so every prompt continues the previous call's prompt + completion,
    # across tool turns and across the env step between the two questions.
    assert expected == [FIRST] + [None] * 5
    assert ep.batch.meta["prompts_not_continuing"] == 0


def test_scripted_prose_before_tool_calls_is_reported_where_the_template_rerenders(byte_tokenizer):
    tok = byte_tokenizer
    ep = run_episode(ScriptedChatClient(script(PROSE), tok), PROSE)
    check_replays_script(ep, PROSE)
    expected = check_episode(ep, tok)
    # The "\n" between the prose and the block is sampled but not re-rendered (ToolAgent strips
    # the prose; the template writes the block straight after it): each call after a tool
    # call diverges right after the prose, at the "\n". Calls after an answer continue.
    for k, exp in enumerate(expected[1:], start=1):
        prev = ep.calls[k - 1]
        if prev.text.startswith("I will"):
            prose = prev.text.split("\n", 1)[0]
            assert exp == len(prev.prompt) + len(text_ids(tok, prose)), k
            assert prev.completion[len(text_ids(tok, prose))] == text_ids(tok, "\n")[0]
        else:
            assert exp is None, k
    assert ep.batch.meta["prompts_not_continuing"] == 4


def _shift(item: SAWItem, by: int) -> SAWItem:
    mask = item.action_mask
    shifted = [0] * by + mask[:-by] if by > 0 else mask[-by:] + [1] * -by
    return SAWItem(input_ids=list(item.input_ids), attention_mask=list(item.attention_mask),
                   action_mask=shifted, weight=item.weight, meta=dict(item.meta),
                   actor_logprobs=item.actor_logprobs)


@pytest.mark.parametrize("by", [1, -1])
def test_the_checker_fails_an_item_whose_action_mask_is_shifted_by_one(byte_tokenizer, by):
    tok = byte_tokenizer
    ep = run_episode(ScriptedChatClient(script(QUESTIONS), tok), QUESTIONS)
    for item, sampled in zip(ep.batch.items, ep.calls):
        assert exactness_problems(item, sampled) == []
        problems = exactness_problems(_shift(item, by), sampled)
        assert len(problems) == 1 and problems[0].startswith("action_mask wrong at positions")
    # and a log-prob moved by one position is caught too
    item, sampled = ep.batch.items[1], ep.calls[1]
    lps = [-0.1 * (i + 1) for i in range(len(sampled.completion))]
    with_lps = Sampled(sampled.prompt, sampled.completion, lps, sampled.text, sampled.finish_reason, None)
    p = len(sampled.prompt)
    good = SAWItem(list(item.input_ids), list(item.attention_mask), list(item.action_mask), 1.0,
                   actor_logprobs=[0.0] * p + lps)
    bad = SAWItem(list(item.input_ids), list(item.attention_mask), list(item.action_mask), 1.0,
                  actor_logprobs=[0.0] * (p - 1) + lps + [0.0])
    assert exactness_problems(good, with_lps) == []
    assert exactness_problems(bad, with_lps)[0].startswith("actor_logprobs wrong")


# ---------------------------------------------------------------- b. local client (tool-tuned tiny model)


def _tune_on_episode(tiny_model_dir, out, *, max_steps: int = 400, margin: float = 3.0,
                     lr: float = 3e-3) -> dict[str, Any]:
    """Cross-entropy on the completions of the first question's scripted episode until greedy
    decoding reproduces every one of them with a logit margin of at least `margin`."""
    import torch

    from ludic_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(tiny_model_dir)
    episode = run_episode(ScriptedChatClient(script(QUESTIONS[:1]), tok), QUESTIONS[:1])
    seqs = [(c.prompt, c.completion) for c in episode.calls]
    width = max(len(p) + len(c) for p, c in seqs)
    ids = torch.full((len(seqs), width), tok.pad_token_id)
    labels = torch.full((len(seqs), width), -100)
    for i, (p, c) in enumerate(seqs):
        ids[i, :len(p) + len(c)] = torch.tensor(p + c)
        labels[i, len(p):len(p) + len(c)] = torch.tensor(c)
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    worst = float("-inf")
    for step in range(max_steps):
        model.train()
        loss = model(input_ids=ids, labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % 5 == 4:
            model.eval()
            with torch.no_grad():
                logits = model(input_ids=ids).logits[:, :-1]
            target = labels[:, 1:]
            on = target != -100
            tgt_logit = logits.gather(-1, target.clamp(min=0).unsqueeze(-1)).squeeze(-1)
            other = logits.scatter(-1, target.clamp(min=0).unsqueeze(-1), float("-inf")).amax(-1)
            worst = float((tgt_logit - other)[on].min())
            if worst >= margin:
                break
    assert worst >= margin, f"tool-tuning did not reach a greedy margin of {margin} (worst {worst:.2f})"
    model.eval()
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return {"steps": step + 1, "margin": worst}


@pytest.fixture(scope="module")
def tool_tuned_model_dir(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("tool-tuned")
    _tune_on_episode(tiny_model_dir, out)
    return out


@pytest.fixture(scope="module")
def local_client(tool_tuned_model_dir):
    from ludic_core.inference import LocalChatClient

    return LocalChatClient(tool_tuned_model_dir)


def test_local_greedy_replays_the_three_call_episode_exactly(local_client):
    tok = local_client.tokenizer
    ep = run_episode(local_client, QUESTIONS[:1], temperature=0.0)
    check_replays_script(ep, QUESTIONS[:1])
    assert all(c.logprobs is not None and len(c.logprobs) == len(c.completion) for c in ep.calls)
    assert ep.batch.has_actor_logprobs
    expected = check_episode(ep, tok)
    assert expected == [FIRST, None, None]  # the model's own <|im_end|> is the template's


@pytest.mark.parametrize("seed", [0, 1])
def test_local_seeded_sampling_is_trained_on_exactly_as_sampled(local_client, seed):
    """T=1: whatever the model samples (it may stray from the script) is checked the same way."""
    ep = run_episode(local_client, QUESTIONS[:1], temperature=1.0, seed=seed)
    assert all(c.logprobs is not None for c in ep.calls)
    check_episode(ep, local_client.tokenizer)


# ---------------------------------------------------------------- c. vLLM (a real CPU server)


@pytest.fixture(scope="module")
def vllm_tool_client(tool_tuned_model_dir, tmp_path_factory):
    """Its own vLLM server for the tool-tuned model (the session's serves the untuned one)."""
    from ludic_core.vllm.client import VLLMChatClient
    from ludic_core.vllm.server import VLLMServerConfig, start_vllm_server
    from ludic_core.vllm.setup import env_python

    if not env_python().exists():
        pytest.fail(f"no vLLM environment at {env_python().parent.parent}: run `ludic serve --setup`")
    server, key = start_vllm_server(tool_tuned_model_dir,
                                    VLLMServerConfig(log_dir=str(tmp_path_factory.mktemp("vllm-tool-logs"))))
    try:
        yield VLLMChatClient(server.base_url, api_key=key)
    finally:
        server.stop()


@pytest.mark.vllm
@pytest.mark.heavy  # 70-90 s, most of it the server's start; `make test-heavy` (and .ci/run) runs it
def test_vllm_greedy_and_sampled_tool_episodes_are_items_exactly_as_sampled(vllm_tool_client, tool_tuned_model_dir):
    from ludic_core.models.tiny import build_byte_tokenizer

    tok = build_byte_tokenizer()
    ep = run_episode(vllm_tool_client, QUESTIONS[:1], temperature=0.0)
    check_replays_script(ep, QUESTIONS[:1])
    assert all(c.logprobs is not None and len(c.logprobs) == len(c.completion) for c in ep.calls)
    # this client asks /v1/completions with rendered ids: tool calls come back as text only
    assert all(not c.tool_calls for c in ep.calls)
    assert check_episode(ep, tok) == [FIRST, None, None]  # vLLM returns the sampled <|im_end|> too
    for seed in (0, 1):
        sampled = run_episode(vllm_tool_client, QUESTIONS[:1], temperature=1.0, seed=seed)
        print(f"\nvLLM T=1 seed {seed}: {[c.text for c in sampled.calls]} -> {check_episode(sampled, tok)}")
