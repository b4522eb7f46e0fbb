"""Weight pushes into a real vLLM server through its native RL API (gloo
engine on CPU): outputs and versions change, bad pushes are refused with the
previous weights still serving, and concurrent completions each come from one
version."""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
import pytest
import torch

from ludic_core.inference import ChatCompletionRequest, InferenceServerError, SamplingConfig
from ludic_core.vllm.client import VLLMChatClient
from ludic_core.vllm.plugin import ludic_gloo_wire as wire
from ludic_core.vllm.publisher import VLLMPolicyPublisher, WeightPushError

pytestmark = pytest.mark.vllm

PROBE = ChatCompletionRequest(messages=[{"role": "user", "content": "probe"}],
                              sampling=SamplingConfig(temperature=0.0, max_tokens=16))


@pytest.fixture(scope="module")
def client(vllm_server):
    return VLLMChatClient(vllm_server.base_url, api_key=vllm_server.api_key)


@pytest.fixture(scope="module")
def publisher(vllm_server, client, tiny_model_and_tokenizer):
    pub = VLLMPolicyPublisher(vllm_server.root_url, api_key=vllm_server.api_key, on_published=client.note_published)
    yield pub
    model, _ = tiny_model_and_tokenizer  # leave the session's server serving the original weights
    pub.publish(model.state_dict(), version=9_999)
    pub.close()


def _perturbed(model, seed: int, scale: float = 0.05) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: v + scale * torch.randn(v.shape, generator=g) for k, v in model.state_dict().items()}


def _probe(client):
    return asyncio.run(client.complete(PROBE))[0]


def _model_with(weights, tiny_model_and_tokenizer):
    import copy

    model = copy.deepcopy(tiny_model_and_tokenizer[0])
    model.load_state_dict(weights)
    return model


def test_publish_changes_outputs_and_the_reported_version(client, publisher, tiny_model_and_tokenizer,
                                                          teacher_logprobs):
    model, _ = tiny_model_and_tokenizer
    publisher.publish(model.state_dict(), version=100)
    base = _probe(client)
    assert base.policy_version == 100
    new = _perturbed(model, seed=1)
    publisher.publish(new, version=101)
    after = _probe(client)
    assert after.policy_version == 101
    assert after.completion_logprobs != base.completion_logprobs
    ref = teacher_logprobs(_model_with(new, tiny_model_and_tokenizer), after, 0.0)
    assert max(abs(a - b) for a, b in zip(ref, after.completion_logprobs)) < 1e-4
    print(f"\npush of {publisher.last_push['mb']:.1f} MB took {publisher.last_push['seconds']:.3f} s")
    publisher.publish(model.state_dict(), version=102)  # back to the original: identical outputs
    again = _probe(client)
    assert again.policy_version == 102 and again.completion_token_ids == base.completion_token_ids
    assert max(abs(a - b) for a, b in zip(again.completion_logprobs, base.completion_logprobs)) < 1e-6


def test_bad_pushes_are_refused_and_the_previous_weights_keep_serving(client, publisher, tiny_model_and_tokenizer):
    model, _ = tiny_model_and_tokenizer
    publisher.publish(model.state_dict(), version=200)
    before = _probe(client)
    good = dict(model.state_dict())
    wrong_shape = {**good, "lm_head.weight": torch.zeros(3, 3)}
    missing = {k: v for k, v in good.items() if k != "model.norm.weight"}
    unknown = {**good, "model.extra.weight": torch.zeros(2)}
    for bad, needle in [(wrong_shape, r"lm_head.weight: shape \[3, 3\] != served \[260, 128\]"),
                        (missing, r"missing parameters \['model.norm.weight'\]"),
                        (unknown, "unknown parameter 'model.extra.weight'")]:
        with pytest.raises(WeightPushError, match=needle) as err:
            publisher.publish(bad, version=201)
        assert "the server keeps version 200" in str(err.value)
    after = _probe(client)
    assert after.policy_version == 200 and after.completion_token_ids == before.completion_token_ids
    assert after.completion_logprobs == before.completion_logprobs


def test_the_server_itself_refuses_what_slips_past_the_client(client, publisher, tiny_model_and_tokenizer):
    """Skip the publisher's own check and send bad pushes through the real
    control flow: the gloo engine refuses them without loading anything."""
    model, _ = tiny_model_and_tokenizer
    publisher.publish(model.state_dict(), version=300)
    before = _probe(client)
    names = list(model.state_dict())
    tensors = [model.state_dict()[n] for n in names]
    metas = [wire.TensorMeta(n, "float32", tuple(t.shape)) for n, t in zip(names, tensors)]
    with pytest.raises(InferenceServerError, match="refusing incomplete weight update, missing"):
        publisher._push(metas[:-2], tensors[:-2], version=301)
    bad = [wire.TensorMeta(m.name, m.dtype, (1,) + m.shape) for m in metas]
    start = time.monotonic()
    with pytest.raises(InferenceServerError, match="refusing weight update, nothing loaded.*shape"):
        publisher._push(bad, [t.unsqueeze(0) for t in tensors], version=302)
    assert time.monotonic() - start < 30  # refused by vote, not by the transfer timeout
    after = _probe(client)
    assert after.policy_version == 300 and after.completion_logprobs == before.completion_logprobs
    publisher.publish(_perturbed(model, seed=2), version=303)  # and the next good push goes through
    assert _probe(client).policy_version == 303


def test_a_push_needs_the_api_key(vllm_server, client, tiny_model_and_tokenizer):
    model, _ = tiny_model_and_tokenizer
    version = _probe(client).policy_version
    for key in (None, "wrong"):
        with pytest.raises(InferenceServerError, match="401 Unauthorized"):
            VLLMPolicyPublisher(vllm_server.root_url, api_key=key).publish(model.state_dict(), version=400)
    raw = httpx.post(f"{vllm_server.root_url}/update_weights", json={"update_info": {}})
    assert raw.status_code == 401
    assert _probe(client).policy_version == version


def test_concurrent_completions_each_come_from_exactly_one_version(client, publisher, tiny_model_and_tokenizer,
                                                                   teacher_logprobs):
    model, _ = tiny_model_and_tokenizer
    weights = {500: model.state_dict(), 501: _perturbed(model, seed=5, scale=0.2)}
    publisher.publish(weights[500], version=500)
    reqs = [ChatCompletionRequest(messages=[{"role": "user", "content": f"wave {i}"}],
                                  sampling=SamplingConfig(temperature=1.0, max_tokens=24, seed=i)) for i in range(16)]
    first_wave = threading.Event()  # the push waits for one whole wave on 500, however slow the machine
    pusher = threading.Thread(target=lambda: (first_wave.wait(120), publisher.publish(weights[501], version=501)))

    async def waves():
        out = []
        while pusher.is_alive() or len(out) < 64:
            out += await asyncio.gather(*[client.complete(r) for r in reqs])
            first_wave.set()
        return out

    pusher.start()
    results = asyncio.run(waves())
    pusher.join()
    models = {v: _model_with(w, tiny_model_and_tokenizer) for v, w in weights.items()}
    seen = {}
    for resp, _ in results:
        ref = teacher_logprobs(models[resp.policy_version], resp, 1.0)
        seen[resp.policy_version] = max(seen.get(resp.policy_version, 0.0),
                                        max(abs(a - b) for a, b in zip(ref, resp.completion_logprobs)))
    assert set(seen) == {500, 501}, seen  # both versions served during the run...
    assert max(seen.values()) < 1e-4, seen  # ...and each completion matches its reported version's weights


def test_lora_is_published_as_merged_weights(client, publisher, tiny_model_and_tokenizer, teacher_logprobs):
    """A publisher without adapter_dir (lora.mode merged) pushes a LoRA run's merged weights,
    also into this server with LoRA serving on (adapters: test_vllm_adapters_live)."""
    import copy

    from ludic_core.config import LoRAConfig
    from ludic_core.lora.peft_model import apply_lora, merged_state_dict

    peft_model = apply_lora(copy.deepcopy(tiny_model_and_tokenizer[0]), LoRAConfig(r=4))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # a non-trivial adapter
    merged = merged_state_dict(peft_model)
    publisher.publish(merged, version=600)
    resp = _probe(client)
    ref = teacher_logprobs(_model_with(merged, tiny_model_and_tokenizer), resp, 0.0)
    assert resp.policy_version == 600 and max(abs(a - b) for a, b in zip(ref, resp.completion_logprobs)) < 1e-4


def test_pushes_further_apart_than_the_servers_keep_alive_still_work(client, publisher, tiny_model_and_tokenizer):
    """Trainer steps are often longer than uvicorn's 5 s keep-alive: a control
    call must never go out on a connection the server already closed."""
    model, _ = tiny_model_and_tokenizer
    publisher.publish(model.state_dict(), version=700)
    time.sleep(6)
    publisher.publish(_perturbed(model, seed=7), version=701)
    assert _probe(client).policy_version == 701
