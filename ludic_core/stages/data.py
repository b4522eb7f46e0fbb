"""A stage's data and inference, built from its spec.

Kept apart from the runner so the spec's data kinds (fixed SFT data, fresh
rollouts of any env) and backends (in-process, vLLM) can grow without
touching the resume/train/checkpoint loop.
"""

from __future__ import annotations

import os
from typing import Any

from ludic_core.algorithms.rl_algorithm import RLAlgorithm
from ludic_core.batching.sources import BatchSource, OfflineBatchSource
from ludic_core.compose.source import rollout_source
from ludic_core.models import tokenizer_fingerprint
from ludic_core.publish.base import InProcessPublisher, PolicyPublisher
from ludic_core.publish.directory import DirectoryPublisher
from ludic_core.queue import SAWStream, StreamBatchSource, connect
from ludic_core.rejection import load_sft_items
from ludic_core.stages.spec import DatasetData, RolloutData, StageSpec, StreamData

__all__ = ["batch_source", "inference", "needs_inference", "publisher_only"]


def needs_inference(spec: StageSpec) -> bool:
    return isinstance(spec.data, RolloutData)


def batch_source(spec: StageSpec, algorithm: RLAlgorithm, tokenizer: Any, client: Any) -> BatchSource:
    data = spec.data
    if isinstance(data, StreamData):
        client = connect(data.url, password=os.environ.get(data.password_env))
        stream = SAWStream(client, key=data.key, group=data.group, consumer=data.consumer)
        return StreamBatchSource(stream, items_per_step=data.items_per_step, max_lag=spec.trainer.max_lag,
                                 tokenizer=tokenizer_fingerprint(tokenizer), vocab_size=len(tokenizer),
                                 max_tokens=spec.trainer.max_seq_len, timeout_s=data.timeout_s)
    if isinstance(data, DatasetData):
        items, _ = load_sft_items(data.path, tokenizer, use=data.use)
        return OfflineBatchSource(items, batch_size=data.batch_size, seed=spec.trainer.seed)
    return rollout_source(data.env, data.agent, data.schedule, algorithm, client,
                          requests_per_draw=data.requests_per_step, max_seq_len=spec.trainer.max_seq_len,
                          branch=data.branch)


def publisher_only(spec: StageSpec) -> PolicyPublisher | None:
    """Where a stage that does not roll out itself (stream data) publishes its
    weights: the actors' vLLM server, or a directory they load from; None for neither."""
    if spec.vllm is not None:
        return inference(spec, spec.model_path)[1]
    if spec.publish_dir is not None:
        return DirectoryPublisher(spec.publish_dir, spec.model_path)
    return None


def inference(spec: StageSpec, serve_from: str) -> tuple[Any, PolicyPublisher]:
    """(client, publisher): in-process by default, else the vLLM server in `spec.vllm`."""
    if spec.vllm is None:
        from ludic_core.inference import LocalChatClient  # torch and transformers: loaded by the stage that decodes

        client = LocalChatClient(serve_from, **spec.local.model_dump())
        return client, InProcessPublisher(client)
    from ludic_core.vllm.client import VLLMChatClient
    from ludic_core.vllm.publisher import VLLMPolicyPublisher  # torch: loaded by the stage that pushes weights

    key, lora = os.environ.get(spec.vllm.api_key_env), spec.vllm.lora
    # a LoRA run publishes its adapter (loaded by name; the client then requests it), else full weights
    adapter_dir = lora.directory(spec.checkpoint_dir) if lora.publishes_adapters(spec.trainer.lora) else None
    vclient = VLLMChatClient(spec.vllm.base_url, model=spec.vllm.model, api_key=key)
    vclient.publisher = publisher = VLLMPolicyPublisher(
        vclient.root_url, api_key=key, bucket_mb=spec.vllm.bucket_mb, on_published=vclient.note_published,
        adapter_dir=adapter_dir, keep_adapters=lora.keep_last)
    return vclient, publisher
