"""Several LoRA adapters of one base compared on one vLLM server in one evaluate run
(`compare_adapters`), against the session's real server: each adapter directory is
loaded for its turn and unloaded after it, and each row is what evaluating that
adapter alone gives."""

from __future__ import annotations

import httpx
import pytest
import torch

from flows.evaluate import EvaluateConfig, evaluate
from flows.policies import VLLMPolicy
from ludic_core.recipes.tic_tac_toe import AGENT, ENV

pytestmark = pytest.mark.slow


def _adapters(model_dir, out, scales: tuple[float, ...]) -> list[str]:
    """Rank-4 adapters of the tiny model, seeded, each further from the base than the last."""
    from ludic_core.config import LoRAConfig
    from ludic_core.lora.adapter_dir import write_adapter_dir
    from ludic_core.lora.peft_model import adapter_config, adapter_state_dict, apply_lora
    from ludic_core.models import load_model_and_tokenizer

    model = apply_lora(load_model_and_tokenizer(model_dir)[0], LoRAConfig(r=4, alpha=8))
    dirs = []
    for i, scale in enumerate(scales):
        g = torch.Generator().manual_seed(i)
        tensors = {k: scale * torch.randn(v.shape, generator=g) for k, v in adapter_state_dict(model).items()}
        write_adapter_dir(out / f"adapter-{i}" / "model", tensors, adapter_config(model), None)
        dirs.append(str(out / f"adapter-{i}" / "model"))
    return dirs


def _served(vllm_server) -> set[str]:
    res = httpx.get(f"{vllm_server.base_url}/models", headers={"Authorization": f"Bearer {vllm_server.api_key}"})
    return {m["id"] for m in res.json()["data"]}


@pytest.mark.vllm
@pytest.mark.heavy  # five evaluate runs (~1-2 min): make test-heavy (and .ci/run) runs it
def test_three_adapters_compare_on_one_server_in_one_run(prefect_api, vllm_server, format_tuned_model_dir,
                                                         tiny_model_and_tokenizer, tiny_model_dir, tmp_path):
    """Over the format-tuned weights (pushed live into the session's server for this test,
    restored after): a base that answers in format, so adapters that move it show."""
    from blocks import InferenceEndpoint
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.vllm.publisher import VLLMPolicyPublisher

    InferenceEndpoint(kind="vllm", base_url=vllm_server.base_url, model_path=vllm_server.model,
                      api_key=vllm_server.api_key).save("adapters-server", overwrite=True)
    adapters = _adapters(tiny_model_dir, tmp_path, (0.03, 0.1, 0.4))
    before = _served(vllm_server)
    common = dict(env=ENV, agent=AGENT, episodes=6, seed=7)
    policy = VLLMPolicy(endpoint_block="adapters-server")
    publisher = VLLMPolicyPublisher(vllm_server.root_url, api_key=vllm_server.api_key)
    try:
        publisher.publish(load_model_and_tokenizer(format_tuned_model_dir)[0].state_dict(), version=1)
        compared = evaluate(EvaluateConfig(policy=policy, compare_adapters=tuple(adapters), **common))
        assert _served(vllm_server) == before  # every adapter it loaded was unloaded
        alone = {a: evaluate(EvaluateConfig(policy=policy.model_copy(update={"adapter": a}), **common))
                 for a in adapters}
        base = evaluate(EvaluateConfig(policy=policy, **common))
    finally:  # leave the session's server serving the original weights
        publisher.publish(tiny_model_and_tokenizer[0].state_dict(), version=0)
        publisher.close()
    rows = {a: {k[len(a) + 1:]: v for k, v in compared.items() if k.startswith(a + "/")} for a in adapters}
    assert all(row["episodes"] == 6 for row in rows.values()), rows
    for a in adapters:  # the row is that adapter's, not the base's or another's
        assert rows[a] == pytest.approx(alone[a], abs=1e-6), (a, rows[a], alone[a])
    played = [tuple(sorted(alone[a].items())) for a in adapters]
    # the adapters really play (tables other than the base's, and not all one table); two nearby
    # adapters may still play the same few greedy games
    assert len(set(played)) >= 2 and set(played) != {tuple(sorted(base.items()))}, (base, alone)


def test_compare_adapters_is_refused_where_it_cannot_mean_anything(tmp_path):
    from ludic_core.compose.policy import ModelPolicy

    with pytest.raises(ValueError, match="policy must be kind 'vllm' without an adapter"):
        EvaluateConfig(policy=ModelPolicy(model_path="m"), env=ENV, compare_adapters=("a",))
    with pytest.raises(ValueError, match="policy must be kind 'vllm' without an adapter"):
        EvaluateConfig(policy=VLLMPolicy(endpoint_block="b", adapter="x"), env=ENV, compare_adapters=("a",))
    with pytest.raises(ValueError, match="names an adapter twice"):
        EvaluateConfig(policy=VLLMPolicy(endpoint_block="b"), env=ENV, compare_adapters=("a", "a"))
    cfg = EvaluateConfig(policy=VLLMPolicy(endpoint_block="b"), env=ENV, compare_adapters=(str(tmp_path / "nope"),))
    with pytest.raises(FileNotFoundError, match="is not an adapter directory"):
        cfg.preflight()
