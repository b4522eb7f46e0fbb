"""Teacher != student through the flows: a vLLM-served teacher (exact ids, same
tokenizer) and a teacher with another tokenizer (messages, rendered by the student)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from flows.policies import VLLMPolicy
from flows.rejection_sampling import RejectionSamplingConfig, rejection_sampling
from flows.sft import SupervisedFinetuneConfig, sft
from ludic_core.compose.policy import ModelPolicy
from ludic_core.config import TrainerConfig
from ludic_core.recipes.tic_tac_toe import AGENT, ENV
from ludic_core.rejection import KeepRule


def _sample(teacher, student: Path, out: Path) -> dict:
    rejection_sampling(RejectionSamplingConfig(env=ENV, agent=AGENT, teacher=teacher, student_path=str(student),
                                               prompts=6, samples_per_prompt=2, keep=KeepRule(), out_dir=str(out)))
    return json.loads((out / "done.json").read_text())


def _sft_steps(student: Path, dataset: str, out: Path) -> list[float]:
    model = sft(SupervisedFinetuneConfig(model_path=str(student), dataset_path=dataset, out_dir=str(out), steps=2,
                                         steps_per_stage=2, batch_size=4, trainer=TrainerConfig(lr=1e-3)))
    assert Path(model, "model.safetensors").exists()
    return [json.loads(line)["loss"] for line in (out / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.vllm
@pytest.mark.slow
@pytest.mark.heavy  # the flow starts its own vLLM server (~40 s): make test-heavy (and .ci/run) runs it
def test_served_teacher_gives_exact_ids(prefect_api, format_tuned_model_dir, tiny_model_dir, tmp_path):
    from datasets import load_from_disk

    started = _sample(VLLMPolicy(model_path=str(format_tuned_model_dir)), tiny_model_dir, tmp_path / "started")
    # the same byte tokenizer on both sides: ids are stored, and they are what the student trains on
    assert started["token_ids"] and started["sampled"] == 12.0
    rows = load_from_disk(started["dataset_path"])
    assert all(r["completion_token_ids"] and r["messages"][-1]["role"] == "assistant" for r in rows)
    assert rows[0]["messages"][-2]["content"].startswith("Board:")
    assert len(_sft_steps(tiny_model_dir, started["dataset_path"], tmp_path / "sft")) == 2


@pytest.mark.vllm
@pytest.mark.slow
def test_a_running_server_named_by_an_endpoint_block(prefect_api, vllm_server, format_tuned_model_dir,
                                                     tiny_model_and_tokenizer, tiny_model_dir, tmp_path):
    """The session's server, serving the format-tuned weights for this test (same shapes,
    pushed live): a teacher that plays in format, named only by a block."""
    from blocks import InferenceEndpoint
    from ludic_core.models import load_model_and_tokenizer
    from ludic_core.vllm.publisher import VLLMPolicyPublisher

    publisher = VLLMPolicyPublisher(vllm_server.root_url, api_key=vllm_server.api_key)
    try:
        publisher.publish(load_model_and_tokenizer(format_tuned_model_dir)[0].state_dict(), version=1)
        InferenceEndpoint(kind="vllm", base_url=vllm_server.base_url, model_path=vllm_server.model,
                          api_key=vllm_server.api_key).save("teacher-server", overwrite=True)
        blocked = _sample(VLLMPolicy(endpoint_block="teacher-server"), tiny_model_dir, tmp_path / "block")
    finally:  # leave the session's server serving the original weights
        publisher.publish(tiny_model_and_tokenizer[0].state_dict(), version=0)
        publisher.close()
    # the served model's tokenizer is not at hand here, so the dataset holds messages only
    assert not blocked["token_ids"] and blocked["sampled"] == 12.0 and blocked["kept"] >= 1


@pytest.mark.slow
def test_teacher_with_another_tokenizer_goes_through_messages(prefect_api, format_tuned_model_dir, tiny_model_dir,
                                                              tmp_path):
    from datasets import load_from_disk

    from ludic_core.models import load_model_and_tokenizer

    model, tok = load_model_and_tokenizer(format_tuned_model_dir)
    tok.add_tokens([f"<extra_{i}>" for i in range(4)])  # another vocabulary: another fingerprint
    model.resize_token_embeddings(len(tok))
    foreign = tmp_path / "foreign"
    model.save_pretrained(foreign)
    tok.save_pretrained(foreign)
    done = _sample(ModelPolicy(model_path=str(foreign)), tiny_model_dir, tmp_path / "rs")
    assert not done["token_ids"]
    rows = load_from_disk(done["dataset_path"])
    assert all(r["completion_token_ids"] == [] and r["tokenizer"] == "" for r in rows)
    losses = _sft_steps(tiny_model_dir, done["dataset_path"], tmp_path / "sft")
    assert len(losses) == 2 and all(loss > 0 for loss in losses)


def test_a_vllm_policy_names_one_source():
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="exactly one of model_path"):
        VLLMPolicy()
    with pytest.raises(ValidationError, match="exactly one of model_path"):
        VLLMPolicy(model_path="m", endpoint_block="b")
