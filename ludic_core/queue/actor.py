"""One actor round: rollouts from the current policy -> credit -> the stream.

An actor does what a synchronous trainer's `RolloutBatchSource` does for one
step (same requests, same credit, same filters and dynamic sampling), then
puts the items on the stream in one atomic, at-most-once write: a round that
dies half-way left nothing, and a retried round that had already landed adds
nothing. Item ids are `ROUND/INDEX`, so the trainer's audit can name each.
"""

from __future__ import annotations

import os
import time
from typing import Any

from pydantic import Field

from ludic_core.compose.configs import BRANCH_HELP, AgentConfig, BranchConfig, EnvConfig, SeedSchedule
from ludic_core.compose.source import rollout_source
from ludic_core.config import AlgorithmConfig, LocalInferenceConfig, VLLMEndpoint
from ludic_core.frozen import FrozenModel
from ludic_core.models import tokenizer_fingerprint
from ludic_core.publish.directory import read_latest
from ludic_core.queue.codec import encode_item
from ludic_core.queue.stream import SAWStream, connect

__all__ = ["ActorSpec", "actor_round", "run_actor_round"]


def actor_round(source: Any, stream: SAWStream, *, round_id: str, env: str, policy_version: int,
                tokenizer: str | None = None, wait_timeout_s: float | None = None) -> dict[str, float]:
    """Wait for room on the stream, draw one batch from `source` (a
    `RolloutBatchSource` on the current policy), put it on the stream as round
    `round_id`. Returns the round's counts and timings."""
    waited = stream.wait_for_room(timeout_s=wait_timeout_s)
    if stream.is_done():  # training ended while this round waited: nothing would train its items
        return {"items": 0.0, "added": 0.0, "wait_s": waited, "generate_s": 0.0, "stopped": 1.0}
    t0 = time.perf_counter()
    batch = source.next_batch()
    gen_s = time.perf_counter() - t0
    entries = [encode_item(it, item_id=f"{round_id}/{k}", env=env,
                           policy_version=int(it.meta.get("policy_version") or policy_version), tokenizer=tokenizer)
               for k, it in enumerate(batch.items)]
    added = stream.put_round(round_id, entries)
    return {"items": float(len(entries)), "added": float(added), "wait_s": waited, "generate_s": gen_s,
            **{k: float(v) for k, v in batch.meta.items() if isinstance(v, (int, float))}}


class ActorSpec(FrozenModel):
    """Everything one actor round needs, as plain JSON (a task parameter):
    what to play, how to assign credit, where the policy and the stream are."""

    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    algorithm: AlgorithmConfig = Field(description="credit and filters; its group_size is the samples per prompt")
    requests_per_round: int = Field(8, ge=1, description="prompts per round, each sampled group_size times")
    schedule: SeedSchedule = Field(SeedSchedule(start=1_000), description="env seeds; round r plays its own block")
    branch: BranchConfig | None = Field(None, description=BRANCH_HELP)
    url: str = Field(description="the Redis server (redis://, rediss:// or unix://)")
    password_env: str = Field("LUDIC_REDIS_PASSWORD", description="environment variable holding the password")
    key: str = "ludic:saw"
    max_backlog: int = Field(2048, ge=0, description="wait while more than this many items are unread")
    wait_timeout_s: float | None = Field(600.0, gt=0, description="give up waiting for room after this long")
    policy_dir: str | None = Field(None, description="where the trainer publishes its weights (DirectoryPublisher); "
                                                    "None with vllm")
    vllm: VLLMEndpoint | None = Field(None, description="roll out through this vLLM server (the trainer pushes "
                                                       "its weights into it) instead of loading policy_dir")
    tokenizer_path: str | None = Field(None, description="with vllm: the served model's dir, to stamp items "
                                                         "with its tokenizer fingerprint")
    local: LocalInferenceConfig = LocalInferenceConfig()
    max_seq_len: int = Field(1024, ge=2)


_DRAWS_PER_ROUND = 64  # seed blocks reserved per round (dynamic sampling draws several)


def run_actor_round(spec: ActorSpec, round_index: int) -> dict[str, float]:
    """Wait for room on the stream, load the newest published policy, play one
    round, put it on the stream as round `round_index` (retrying the same index
    writes nothing twice). A round that finds training over plays nothing."""
    stream = SAWStream(connect(spec.url, password=os.environ.get(spec.password_env) or None), key=spec.key,
                       max_backlog=spec.max_backlog)
    try:
        stream.ensure_group()
        # wait before loading the policy: a round generated from weights loaded before a long wait would be stale
        waited = stream.wait_for_room(timeout_s=spec.wait_timeout_s)
        if stream.is_done():
            return {"items": 0.0, "added": 0.0, "wait_s": waited, "generate_s": 0.0, "stopped": 1.0,
                    "round": float(round_index)}
        source, version, fingerprint = _source(spec, round_index)
        out = actor_round(source, stream, round_id=f"round-{round_index}", env=spec.env.name,
                          policy_version=version, tokenizer=fingerprint, wait_timeout_s=spec.wait_timeout_s)
    finally:
        stream.client.close()
    return {**out, "wait_s": out["wait_s"] + waited, "policy_version": float(version), "round": float(round_index)}


def _source(spec: ActorSpec, round_index: int) -> tuple[Any, int, str | None]:
    """A `RolloutBatchSource` on the newest policy: (source, its version, tokenizer fingerprint)."""
    # deferred: torch and transformers, which an ActorSpec (a task parameter) must load without
    from ludic_core.algorithms import build_algorithm
    from ludic_core.inference import LocalChatClient

    if spec.vllm is not None:
        from ludic_core.vllm.client import VLLMChatClient
        from ludic_core.vllm.server import wait_for_health

        # the server may be restarting (its owner replaces a dead one): wait rather than burn this round's retries
        wait_for_health(spec.vllm.base_url, spec.wait_timeout_s or 600.0)
        # every completion is stamped with the server's weight version, whatever was pushed meanwhile
        client: Any = VLLMChatClient(spec.vllm.base_url, model=spec.vllm.model,
                                     api_key=os.environ.get(spec.vllm.api_key_env) or None)
        if spec.vllm.lora.mode != "merged":  # a LoRA trainer publishes adapters: play the newest one
            client.follow_newest_adapter()
        version, fingerprint = 0, _fingerprint(spec.tokenizer_path)
    else:
        latest = read_latest(spec.policy_dir) if spec.policy_dir else None
        if latest is None:
            raise FileNotFoundError(f"no published policy in {spec.policy_dir!r} (latest.json): publish one first")
        version, model_dir = latest
        client = LocalChatClient(model_dir, policy_version=version, **spec.local.model_dump())
        fingerprint = tokenizer_fingerprint(client.tokenizer)
    source = rollout_source(spec.env, spec.agent, spec.schedule, build_algorithm(spec.algorithm), client,
                            requests_per_draw=spec.requests_per_round, max_seq_len=spec.max_seq_len,
                            first_draw=round_index * _DRAWS_PER_ROUND, strategy_seed=spec.schedule.start + round_index,
                            branch=spec.branch)
    return source, version, fingerprint


def _fingerprint(tokenizer_path: str | None) -> str | None:
    if tokenizer_path is None:
        return None
    from transformers import AutoTokenizer

    return tokenizer_fingerprint(AutoTokenizer.from_pretrained(tokenizer_path))
