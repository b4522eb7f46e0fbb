"""LocalChatClient against the model it wraps: log-probs, limits, seeds, weights."""

import asyncio

import pytest
import torch

from ludic_core.inference import ChatCompletionRequest, ContextLengthError, LocalChatClient, SamplingConfig


@pytest.fixture(scope="module")
def client(tiny_model_dir):
    return LocalChatClient(tiny_model_dir, dtype="float32")  # exact log-probs on any device


def _req(text: str, **sampling) -> ChatCompletionRequest:
    return ChatCompletionRequest(
        messages=[{"role": "user", "content": text}], sampling=SamplingConfig(**sampling)
    )


def _teacher_forced(model, resp, temperature: float, top_p: float = 1.0) -> list[float]:
    ids = torch.tensor([resp.prompt_token_ids + resp.completion_token_ids], device=model.device)
    with torch.no_grad():
        logits = model(ids).logits[0].float()
    logp = torch.log_softmax(logits / temperature, dim=-1)
    start = len(resp.prompt_token_ids) - 1
    out = []
    for i, tok in enumerate(resp.completion_token_ids):
        row = logp[start + i]
        if top_p < 1.0:
            probs, order = torch.sort(row.exp(), descending=True)
            keep = (probs.cumsum(0) - probs) < top_p
            kept = order[keep]
            row = torch.full_like(row, float("-inf"))
            row[kept] = torch.log_softmax(logp[start + i][kept], dim=-1)
        out.append(float(row[tok]))
    return out


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_teacher_forced_forward(client, temperature):
    reqs = [_req(f"prompt number {i}", temperature=temperature, max_tokens=24, seed=i) for i in range(8)]

    async def run():
        return await asyncio.gather(*[client.complete(r) for r in reqs])

    results = asyncio.run(run())
    worst = 0.0
    for resp, info in results:
        assert len(resp.completion_logprobs) == len(resp.completion_token_ids) > 0
        ref = _teacher_forced(client.model, resp, temperature)
        worst = max(worst, max(abs(a - b) for a, b in zip(ref, resp.completion_logprobs)))
    assert worst < 1e-4, worst
    # Arriving together, the 8 requests were decoded as one batch.
    assert {info["batch_size"] for _, info in results} == {8}


def test_top_p_logprobs_are_renormalised_over_the_nucleus(client):
    resp, _ = asyncio.run(client.complete(_req("nucleus", temperature=1.0, top_p=0.5, max_tokens=16, seed=3)))
    ref = _teacher_forced(client.model, resp, 1.0, top_p=0.5)
    assert max(abs(a - b) for a, b in zip(ref, resp.completion_logprobs)) < 1e-4


def test_max_tokens_gives_length_finish(client):
    resp, _ = asyncio.run(client.complete(_req("x", temperature=1.0, max_tokens=5, seed=1)))
    # A random tiny model practically never emits eos within 5 tokens.
    assert resp.finish_reason == "length"
    assert len(resp.completion_token_ids) == 5


def test_seed_reproduces_and_different_seeds_differ(client):
    a, _ = asyncio.run(client.complete(_req("seeded", max_tokens=20, seed=42)))
    b, _ = asyncio.run(client.complete(_req("seeded", max_tokens=20, seed=42)))
    c, _ = asyncio.run(client.complete(_req("seeded", max_tokens=20, seed=43)))
    assert a.completion_token_ids == b.completion_token_ids
    assert a.completion_token_ids != c.completion_token_ids


def test_seeded_sample_does_not_depend_on_batch_mates(client):
    alone, _ = asyncio.run(client.complete(_req("who am I", max_tokens=12, seed=5)))

    async def crowd():
        others = [client.complete(_req("noise " * (i + 1), max_tokens=12, seed=100 + i)) for i in range(5)]
        return await asyncio.gather(client.complete(_req("who am I", max_tokens=12, seed=5)), *others)

    together = asyncio.run(crowd())[0][0]
    assert together.completion_token_ids == alone.completion_token_ids


def test_stop_string_cuts_text_and_sets_stop(client, tiny_model_and_tokenizer):
    # Greedy output is deterministic: find a substring it will produce, then stop on it.
    free, _ = asyncio.run(client.complete(_req("stop test", temperature=0.0, max_tokens=30)))
    text = free.text
    assert len(text) >= 6
    stop = text[3:5]
    cut, _ = asyncio.run(client.complete(_req("stop test", temperature=0.0, max_tokens=30, stop=[stop])))
    assert cut.finish_reason == "stop"
    assert cut.text == text[: text.find(stop)]
    assert stop not in cut.text
    assert cut.completion_token_ids == free.completion_token_ids[: len(cut.completion_token_ids)]


def test_eos_token_ends_generation_with_stop(tiny_model_dir):
    """Declare the greedy first token an eos id: generation must stop right there."""
    c = LocalChatClient(tiny_model_dir)
    free, _ = asyncio.run(c.complete(_req("end", temperature=0.0, max_tokens=10)))
    assert free.finish_reason == "length"
    first = free.completion_token_ids[0]
    c._decoder.eos_ids = {first}
    resp, _ = asyncio.run(c.complete(_req("end", temperature=0.0, max_tokens=10)))
    assert resp.finish_reason == "stop"
    assert resp.completion_token_ids == [first]


def test_sync_weights_changes_outputs_and_version(tiny_model_dir):
    c = LocalChatClient(tiny_model_dir)
    before, _ = asyncio.run(c.complete(_req("weights", temperature=0.0, max_tokens=12)))
    assert before.policy_version == 0
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in c.model.state_dict().items()}
    assert c.sync_weights(new, version=1) == 1
    after, _ = asyncio.run(c.complete(_req("weights", temperature=0.0, max_tokens=12)))
    assert after.policy_version == 1
    assert after.completion_token_ids != before.completion_token_ids
    assert torch.equal(c.model.state_dict()["lm_head.weight"], new["lm_head.weight"].to(c.model.device))


def test_sync_weights_refuses_bad_shape_and_unknown_name_atomically(tiny_model_dir):
    c = LocalChatClient(tiny_model_dir)
    state = {k: v.clone() for k, v in c.model.state_dict().items()}
    bad = {"lm_head.weight": torch.zeros(3, 3), "model.norm.weight": torch.zeros_like(state["model.norm.weight"]),
           "no.such.param": torch.zeros(1)}
    with pytest.raises(ValueError, match=r"no\.such\.param.*lm_head\.weight: got \(3, 3\)"):
        c.sync_weights(bad, version=9)
    assert c.policy_version == 0
    for k, v in c.model.state_dict().items():
        assert torch.equal(v, state[k]), k


def test_prompt_longer_than_context_is_a_clear_error(client):
    long = "a" * (client.model.config.max_position_embeddings + 10)
    with pytest.raises(ContextLengthError, match="model.s context"):
        asyncio.run(client.complete(_req(long, max_tokens=4)))


def test_weight_sync_during_continuous_decoding_splits_requests_by_version(tiny_model_dir):
    """Requests keep arriving while a weight sync waits: rows already decoding finish on the
    old weights (version 0), no new row joins until the sync is in, and what arrives after
    it is decoded on the new weights (version 1). Nobody hangs."""
    import threading

    c = LocalChatClient(tiny_model_dir)
    c._decoder.eos_ids = {-1}  # every row runs to its max_tokens: the first ones are still decoding
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in c.model.state_dict().items()}
    synced = threading.Event()

    async def run():
        # 3 rows in a 4-slot frame: a free slot that a late request could take mid-run
        first = [asyncio.create_task(c.complete(_req(f"old {i}", max_tokens=300, seed=i))) for i in range(3)]
        while not c._decoder.stats["steps"]:  # decoding has started
            await asyncio.sleep(0.001)
        syncer = asyncio.get_running_loop().run_in_executor(
            None, lambda: (c.sync_weights(new, version=1), synced.set()))
        while not c._syncing.is_set() and not synced.is_set():
            await asyncio.sleep(0)
        late = [asyncio.create_task(c.complete(_req(f"new {i}", max_tokens=8, seed=i))) for i in range(4)]
        await syncer
        return await asyncio.gather(*first), await asyncio.gather(*late)

    first, late = asyncio.run(run())
    assert {r.policy_version for r, _ in first} == {0}
    assert {r.policy_version for r, _ in late} == {1}
    assert all(len(r.completion_token_ids) == 300 for r, _ in first)


def test_a_rendered_prompt_is_reused_by_content_and_the_cache_is_bounded(tiny_model_dir, monkeypatch):
    from ludic_core.inference import local

    monkeypatch.setattr(local, "PROMPT_CACHE", 2)
    c = LocalChatClient(tiny_model_dir, dtype="float32")
    renders = []
    real, render = c.tokenizer.apply_chat_template, local.chat_prompt_ids
    monkeypatch.setattr(local, "chat_prompt_ids", lambda *a, **k: renders.append(1) or render(*a, **k))
    a, b, d = _req("first board"), _req("second board"), _req("third board")
    ids = c.encode_prompt(a)
    assert ids == list(c.tokenizer.encode(real(a.message_list(), add_generation_prompt=True, tokenize=False),
                                          add_special_tokens=False))
    ids.append(-1)  # a caller's list is its own: the kept prompt is unchanged
    assert c.encode_prompt(_req("first board", temperature=0.3)) == ids[:-1]  # sampling is not content
    assert len(renders) == 1
    assert c.encode_prompt(b) != ids[:-1] and len(renders) == 2
    tools = ChatCompletionRequest(messages=a.messages, tools=({"type": "function", "function": {"name": "f"}},))
    c.encode_prompt(tools)  # tools are content: rendered, and "first board" is dropped, least recent
    assert len(renders) == 3
    c.encode_prompt(d)
    c.encode_prompt(a)
    assert len(renders) == 5


def test_a_flows_local_engine_config_says_whether_the_decode_step_compiles(tiny_model_dir):
    """`local.compile` (a flow's form, a YAML file) reaches the decoder: "auto" compiles on a GPU only,
    true everywhere, false nowhere; anything else is refused naming the field."""
    from pydantic import ValidationError

    from ludic_core.compose.policy import ModelPolicy, model_client
    from ludic_core.config import LocalInferenceConfig

    for value, chosen in (("auto", "auto"), (True, True), ("false", False)):
        client, _ = model_client(ModelPolicy(model_path=str(tiny_model_dir), local={"compile": value}))
        assert client._decoder.compile == chosen
    assert LocalInferenceConfig().compile == "auto"
    with pytest.raises(ValidationError, match="compile"):
        LocalInferenceConfig(compile="sometimes")
