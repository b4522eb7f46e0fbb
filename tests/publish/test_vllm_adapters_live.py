"""A LoRA run's adapters hot-swapped into the session's real vLLM server (CPU
build, started with `--lora-rank 8`): each publish loads `policy-vN` from the
adapter directory, the client requests the newest, completions report the
adapter's version and score the same under the trainer's own scorer, older
adapters are unloaded beyond keep_last, and bad adapters are refused with the
previous one still serving."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
import torch

from ludic_core.algorithms import build_algorithm, make_sft
from ludic_core.batching.sources import OfflineBatchSource
from ludic_core.config import LoRAConfig, TrainerConfig
from ludic_core.inference import ChatCompletionRequest, SamplingConfig, UnknownServedModelError
from ludic_core.lora.peft_model import adapter_config, adapter_state_dict
from ludic_core.models import load_model_and_tokenizer
from ludic_core.training.trainer import Trainer
from ludic_core.vllm.adapters import read_published
from ludic_core.vllm.client import VLLMChatClient
from ludic_core.vllm.publisher import AdapterLoadError, VLLMPolicyPublisher

pytestmark = pytest.mark.vllm


def _req(text: str, model: str | None = None, **sampling) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[{"role": "user", "content": text}], model=model,
                                 sampling=SamplingConfig(**{"max_tokens": 12, "seed": 7, **sampling}))


def _ask(client, *reqs):
    async def run():
        return await asyncio.gather(*(client.complete(r) for r in reqs))
    return [resp for resp, _ in asyncio.run(run())]


def _served(publisher) -> dict[str, str | None]:
    """name -> adapter path (None for the base) of what the server serves now."""
    return {m["id"]: (m["root"] if m.get("parent") else None) for m in publisher.adapters.models()}


@pytest.fixture(scope="module")
def run(vllm_server, tiny_model_dir, sft_items, tmp_path_factory):
    """A LoRA trainer (r=4, served in the server's rank-8 slots) publishing into the session's server."""
    client = VLLMChatClient(vllm_server.base_url, api_key=vllm_server.api_key)
    publisher = VLLMPolicyPublisher(vllm_server.root_url, api_key=vllm_server.api_key, keep_adapters=2,
                                    on_published=client.note_published,
                                    adapter_dir=tmp_path_factory.mktemp("run") / "adapters")
    model, tok = load_model_and_tokenizer(tiny_model_dir)
    cfg = TrainerConfig(lr=5e-2, max_seq_len=512, dtype="float32", device="cpu", lora=LoRAConfig(r=4, alpha=8))
    tr = Trainer(model, make_sft(), OfflineBatchSource(sft_items, batch_size=8, seed=0), cfg, tokenizer=tok,
                 publisher=publisher)
    yield client, tr, publisher
    for name in publisher.adapters.loaded:  # leave the session's server serving its base alone
        publisher.control.post("/v1/unload_lora_adapter", json={"lora_name": name})
    publisher.close()


def test_each_publish_loads_the_adapter_and_completions_report_its_version(run, tiny_model_dir):
    client, tr, publisher = run
    weight_version = publisher.served_version()
    tr.train(2)
    served = _served(publisher)
    assert [n for n in served if n.startswith("policy-v")] == ["policy-v1", "policy-v2"]
    assert Path(served["policy-v2"]) == publisher.adapters.adapter_dir / "policy-v2"  # read from the adapter_dir
    assert publisher.published_model == client.model == "policy-v2" and publisher.published_version == 2
    assert publisher.served_version() == weight_version  # the base was never pushed
    newest, older, base = _ask(client, _req("hi"), _req("hi", "policy-v1"), _req("hi", "policy"))
    assert (newest.policy_version, older.policy_version) == (2, 1)
    assert base.policy_version not in (1, 2)  # the base's own weight version
    assert newest.completion_logprobs != older.completion_logprobs  # two adapters, two distributions


def test_samples_of_the_newest_adapter_score_the_same_under_the_trainer(run, tiny_model_dir):
    """Tokens sampled by vLLM from adapter v2 at T=0.8, teacher-forced through the trainer's
    own scorer at T=0.8: the same log-probs to fp32 tolerance; the bare base disagrees."""
    client, tr, _ = run
    assert client.model == "policy-v2"
    resps = _ask(client, *[_req(f"game {i}", temperature=0.8, seed=i, max_tokens=16) for i in range(4)])
    base, _ = load_model_and_tokenizer(tiny_model_dir)
    worst, base_gap = 0.0, 0.0
    tr.model.eval()
    for r in resps:
        assert r.policy_version == 2
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


def test_rollout_records_name_the_adapter_version(run):
    from ludic_core.compose.configs import SeedSchedule
    from ludic_core.compose.source import rollout_source
    from ludic_core.config import GRPOConfig
    from ludic_core.recipes.tic_tac_toe import AGENT, ENV

    client, _, _ = run
    source = rollout_source(ENV, AGENT, SeedSchedule(start=5), build_algorithm(GRPOConfig(group_size=2)), client,
                            requests_per_draw=2, max_seq_len=512)
    items = source.next_batch().items  # what max_lag filtering reads
    assert items and {it.meta["policy_version"] for it in items} == {2}


def test_adapters_beyond_keep_last_are_unloaded_oldest_first(run):
    client, tr, publisher = run
    v1_dir = publisher.adapters.adapter_dir / "policy-v1"
    tr.train(3)
    assert [n for n in _served(publisher) if n.startswith("policy-v")] == ["policy-v2", "policy-v3"]
    assert v1_dir.is_dir()  # a request still running on v1 may need its files: deleted one publish later
    with pytest.raises(UnknownServedModelError, match=r"'policy-v1' is not served .*policy, policy-v2, policy-v3"
                                                      r".*older than the publisher's keep_last") as err:
        _ask(client, _req("hi", "policy-v1"))
    assert err.value.model == "policy-v1" and "policy-v3" in err.value.served
    with pytest.raises(UnknownServedModelError, match="'gpt-4' is not served"):
        _ask(client, _req("hi", "gpt-4"))
    tr.train(4)
    assert not v1_dir.exists() and (publisher.adapters.adapter_dir / "policy-v2").is_dir()
    assert [n for n in _served(publisher) if n.startswith("policy-v")] == ["policy-v3", "policy-v4"]
    assert [a.name for a in publisher.published_adapters] == ["policy-v1", "policy-v2", "policy-v3", "policy-v4"]
    assert all(a.bytes > 0 and Path(a.path).name == a.name for a in publisher.published_adapters)
    logged = read_published(publisher.adapters.adapter_dir)  # what the run's artifact lists
    assert [(r["version"], r["name"]) for r in logged] == [(v, f"policy-v{v}") for v in (1, 2, 3, 4)]


def test_a_client_following_an_unloaded_adapter_moves_to_the_newest(run, vllm_server):
    _, _, publisher = run
    actor = VLLMChatClient(vllm_server.base_url, api_key=vllm_server.api_key, model="policy")
    assert actor.follow_newest_adapter() == "policy-v4"
    actor.model = "policy-v2"  # as if it followed v2 before two publishes elsewhere
    (resp,) = _ask(actor, _req("hi"))
    assert resp.policy_version == 4 and actor.model == "policy-v4"


def test_adapter_directories_compare_on_one_server_and_leave_it_as_found(run, vllm_server, tmp_path):
    """What evaluation and rejection sampling do with `VLLMPolicy.adapter` (a LoRA checkpoint's
    model/): load it for the block under its own name, unload it afterwards."""
    from ludic_core.compose.serving import served_adapter

    client, tr, publisher = run
    tr.checkpoint_dir = tmp_path / "ckpt"
    checkpoint = tr.save_checkpoint() / "model"  # adapter v4's files, with the base's fingerprint
    greedy = dict(temperature=0.0, max_tokens=10)
    with served_adapter(vllm_server.root_url, vllm_server.api_key, str(checkpoint)) as name:
        assert name.startswith("step_00000004-")
        assert name in _served(publisher)
        with served_adapter(vllm_server.root_url, vllm_server.api_key, "policy-v3") as by_name:
            assert by_name == "policy-v3"  # a name the server serves is used as given
            disk, live, v3 = _ask(client, _req("same", name, **greedy), _req("same", "policy-v4", **greedy),
                                  _req("same", "policy-v3", **greedy))
    assert disk.completion_token_ids == live.completion_token_ids
    assert disk.completion_logprobs == pytest.approx(live.completion_logprobs, abs=1e-6)
    assert v3.completion_logprobs != pytest.approx(live.completion_logprobs, abs=1e-3)
    assert name not in _served(publisher) and "policy-v3" in _served(publisher)  # left as found


def test_bad_adapters_are_refused_and_the_previous_one_keeps_serving(run, vllm_server, tiny_model_dir, tmp_path):
    from ludic_core.lora.peft_model import apply_lora

    client, tr, publisher = run
    greedy = dict(temperature=0.0, max_tokens=10)
    (before,) = _ask(client, _req("same", **greedy))
    assert before.policy_version == 4
    tensors, config = adapter_state_dict(tr.model), adapter_config(tr.model)
    key = next(k for k in tensors if k.endswith("lora_A.weight"))
    wrong_shape = {**tensors, key: tensors[key][:2]}
    with pytest.raises(AdapterLoadError, match=r"refusing to publish adapter 'policy-v5'.*lora_A.weight: shape "
                                               r"\[2, 128\] != \[4, 128\].*keeps serving 'policy-v4'"):
        publisher.publish_adapter(wrong_shape, config, version=5)
    wide, _ = load_model_and_tokenizer(tiny_model_dir)
    wide = apply_lora(wide, LoRAConfig(r=16))  # fits its own config, but not the server's rank-8 slots
    with pytest.raises(AdapterLoadError, match=r"refused adapter 'policy-v5' from .*policy-v5: .*LoRA rank 16 is "
                                               r"greater than max_lora_rank 8.*keeps serving 'policy-v4'"):
        publisher.publish_adapter(adapter_state_dict(wide), adapter_config(wide), version=5)
    assert not (publisher.adapters.adapter_dir / "policy-v5").exists()  # nothing refused is left behind
    with pytest.raises(AdapterLoadError, match=r"refused adapter 'policy-v5' from .*nowhere: 404.*No adapter found"
                                               r".*storage it sees"):
        publisher.adapters.load_dir("policy-v5", tmp_path / "nowhere")
    assert publisher.published_model == client.model == "policy-v4"
    assert httpx.get(f"{vllm_server.root_url}/health").status_code == 200
    (after,) = _ask(client, _req("same", **greedy))
    assert after.policy_version == 4 and after.completion_token_ids == before.completion_token_ids
    assert after.completion_logprobs == pytest.approx(before.completion_logprobs, abs=1e-6)

