"""LocalChatClient serves a base plus named LoRA adapters; an in-process LoRA run
publishes adapters only, and rollouts name the adapter (version) that produced them."""

from __future__ import annotations

import asyncio

import pytest
import torch

from ludic_core.algorithms import make_sft
from ludic_core.batching.sources import OfflineBatchSource
from ludic_core.config import LoRAConfig, TrainerConfig
from ludic_core.inference import ChatCompletionRequest, LocalChatClient, SamplingConfig
from ludic_core.inference.adapters import UnknownModelError
from ludic_core.models import load_model_and_tokenizer
from ludic_core.publish import InProcessPublisher
from ludic_core.training.trainer import Trainer


def _req(text: str, model: str | None = None, **sampling) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[{"role": "user", "content": text}], model=model,
                                 sampling=SamplingConfig(**{"max_tokens": 12, "seed": 7, **sampling}))


def _ask(client, *reqs):
    async def run():
        return await asyncio.gather(*(client.complete(r) for r in reqs))
    return [resp for resp, _ in asyncio.run(run())]


def _lora_run(model_dir, items, client, mode="auto", **cfg) -> tuple[Trainer, InProcessPublisher]:
    model, tok = load_model_and_tokenizer(model_dir)
    cfg = {"lr": 5e-2, "max_seq_len": 512, "dtype": "float32", "lora": LoRAConfig(r=4, alpha=8), **cfg}
    publisher = InProcessPublisher(client, mode=mode)
    tr = Trainer(model, make_sft(), OfflineBatchSource(items, batch_size=8, seed=0), TrainerConfig(**cfg),
                 tokenizer=tok, publisher=publisher)
    return tr, publisher


@pytest.fixture(scope="module")
def served(tiny_model_dir, sft_items):
    """A client fed 3 adapter versions by a LoRA trainer (keep_last=2: v2 and v3 stay)."""
    client = LocalChatClient(tiny_model_dir, dtype="float32", device="cpu")
    tr, publisher = _lora_run(tiny_model_dir, sft_items, client)
    tr.train(3)
    return client, tr, publisher


def test_publish_sends_the_adapter_only_and_rollouts_name_it(served, tiny_model_dir):
    client, tr, publisher = served
    assert publisher.published_model == "policy-v3" and client.adapters.names == ["policy-v2", "policy-v3"]
    base, _ = load_model_and_tokenizer(tiny_model_dir)
    served_base = client.adapters.base_state()
    assert all(torch.equal(served_base[k], v) for k, v in base.state_dict().items())  # no full weights pushed
    default, v2, bare = _ask(client, _req("hi"), _req("hi", "policy-v2"), _req("hi", "policy"))
    assert (default.policy_version, v2.policy_version, bare.policy_version) == (3, 2, 0)
    assert client.policy_version == 3


def test_unknown_or_unloaded_adapter_names_are_refused_clearly(served):
    client, _, _ = served
    with pytest.raises(UnknownModelError, match=r"'policy-v1' is not served here.*policy-v2.*policy-v3"):
        _ask(client, _req("hi", "policy-v1"))  # unloaded: only the newest 2 are kept
    with pytest.raises(UnknownModelError, match="'gpt-4' is not served"):
        _ask(client, _req("hi", "gpt-4"))


def test_samples_of_adapter_n_score_the_same_under_the_trainer(served, tiny_model_dir):
    """Tokens sampled from adapter v3 at T=0.8, teacher-forced through the trainer's own
    scorer at T=0.8: the same log-probs to float tolerance; the bare base disagrees."""
    client, tr, _ = served
    resps = _ask(client, *[_req(f"game {i}", temperature=0.8, seed=i, max_tokens=16) for i in range(4)])
    base, _ = load_model_and_tokenizer(tiny_model_dir)
    worst, base_gap = 0.0, 0.0
    tr.model.eval()
    for r in resps:
        assert r.policy_version == 3
        ids = torch.tensor([r.prompt_token_ids + r.completion_token_ids])
        start = len(r.prompt_token_ids) - 1
        with torch.no_grad():
            lp, _ = tr.scorer(ids, torch.ones_like(ids), start, torch.tensor([0.8]), False)
            ref = torch.log_softmax(base(ids).logits[0, start:-1].float() / 0.8, -1)
        sampled = torch.tensor(r.completion_logprobs)
        worst = max(worst, float((lp[0] - sampled).abs().max()))
        tokens = torch.tensor(r.completion_token_ids)
        base_gap = max(base_gap, float((ref[torch.arange(len(tokens)), tokens] - sampled).abs().max()))
    tr.model.train()
    assert worst < 1e-4, worst
    assert base_gap > 1e-2, base_gap  # the adapter changed the distribution: the match is not trivial


def test_requests_for_different_adapters_are_served_by_their_own(served):
    """Mixed requests in flight at once: each answered by the adapter it named (one batch each)."""
    client, _, _ = served
    greedy = dict(temperature=0.0, max_tokens=10)
    alone = [_ask(client, _req("same prompt", m, **greedy))[0] for m in ("policy-v2", "policy-v3", "policy")]
    mixed = _ask(client, *[_req("same prompt", m, **greedy) for m in ("policy-v2", "policy-v3", "policy")])
    for m, a in zip(mixed, alone):
        assert m.completion_token_ids == a.completion_token_ids
        assert m.completion_logprobs == pytest.approx(a.completion_logprobs, abs=1e-5)
    assert alone[0].completion_logprobs != pytest.approx(alone[1].completion_logprobs, abs=1e-3)  # they differ
    assert [r.policy_version for r in mixed] == [2, 3, 0]


def test_merged_mode_still_publishes_full_weights(tiny_model_dir, sft_items):
    client = LocalChatClient(tiny_model_dir, dtype="float32", device="cpu")
    tr, publisher = _lora_run(tiny_model_dir, sft_items, client, mode="merged")
    tr.train(2)
    assert client.adapters.names == [] and client.policy_version == 2 and publisher.published_model is None
    merged = tr.full_weights()
    assert max(float((client.model.state_dict()[k] - v).abs().max()) for k, v in merged.items()) == 0.0


def test_adapter_mode_refuses_a_full_fine_tune(tiny_model_dir, sft_items):
    client = LocalChatClient(tiny_model_dir, dtype="float32", device="cpu")
    tr, _ = _lora_run(tiny_model_dir, sft_items, client, mode="adapter", lora=None)
    with pytest.raises(ValueError, match="adapters come from a LoRA run"):
        tr.train(1)


def test_an_adapter_that_does_not_fit_is_refused_and_nothing_changes(served):
    client, tr, _ = served
    from ludic_core.lora.peft_model import adapter_config, adapter_state_dict

    tensors = adapter_state_dict(tr.model)
    partial = dict(list(tensors.items())[1:])
    with pytest.raises(ValueError, match="'broken' does not fit its config's layers: missing"):
        client.load_adapter("broken", partial, adapter_config(tr.model), version=9)
    assert client.adapters.names == ["policy-v2", "policy-v3"] and client.policy_version == 3
    with pytest.raises(ValueError, match="is the base model's served name"):
        client.load_adapter("policy", tensors, adapter_config(tr.model), version=9)


def test_an_adapter_checkpoint_directory_is_served_after_its_base_is_checked(served, tiny_model_dir, tmp_path):
    from ludic_core.models import build_tiny_model

    client, tr, _ = served
    tr.checkpoint_dir = tmp_path / "ckpt"
    adapter_dir = tr.save_checkpoint() / "model"
    client.load_adapter("from-disk", adapter_dir, version=3, make_default=False)
    greedy = dict(temperature=0.0, max_tokens=10)
    disk, live = _ask(client, _req("same", "from-disk", **greedy), _req("same", "policy-v3", **greedy))
    assert disk.completion_token_ids == live.completion_token_ids
    assert disk.completion_logprobs == pytest.approx(live.completion_logprobs, abs=1e-6)
    client.unload_adapter("from-disk")
    other = LocalChatClient(build_tiny_model(tmp_path / "other", "tiny-1m", seed=3), dtype="float32", device="cpu")
    with pytest.raises(ValueError, match="an adapter only fits its own base"):
        other.load_adapter("x", adapter_dir, version=1)
