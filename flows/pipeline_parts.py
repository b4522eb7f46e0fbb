"""`pipeline_rl` taken apart: `pipeline_trainer` and `pipeline_actor` run as
separate deployments, on separate work pools and machines, joined by a
`RedisQueue` block (the stream) and either an `InferenceEndpoint` block (the
actors' vLLM server, which the trainer pushes its weights into) or a policy
directory both can read. Scale out by running more `pipeline_actor` runs.
"""

from __future__ import annotations

import time
from typing import ClassVar

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field, model_validator

from flows.common import SCHEDULE_FOLLOWS_STEPS, FlowConfig, LaunchConfig, held, require_model_dir
from flows.pipeline_rl import (KEY_ENV, ActorLaunch, StageChain, actor_pool, keep_actors_busy, queue_report,
                               redis_queue)
from ludic_core.bounds import MAX_BATCH, MAX_PROCESSES, MAX_SEQ_LEN, MAX_STEPS, bounded
from ludic_core.compose.configs import AgentConfig, EnvConfig, SeedSchedule
from ludic_core.config import (PIPELINE_TRAINER, AlgorithmConfig, GRPOConfig, LocalInferenceConfig, TrainerConfig,
                               VLLMEndpoint, check_max_lag, group_size_of, reuse_of)
from ludic_core.queue.actor import ActorSpec
from ludic_core.training.checkpoint import verified_checkpoint
from ludic_core.stages.spec import StageSpec, StreamData
from tasks.artifacts import table_artifact

VLLM_KEY_ENV = "LUDIC_VLLM_API_KEY"
_ENDPOINT = "name of an InferenceEndpoint block (kind vllm): the actors' server; None = policy_dir"


def _endpoint(block: str | None) -> VLLMEndpoint | None:
    """The block's server as a stage/actor endpoint; its key goes to the environment, never a spec."""
    import os

    from flows.policies import endpoint_from_block

    if block is None:
        return None
    ep = endpoint_from_block(block)
    os.environ[VLLM_KEY_ENV] = ep["api_key"] or ""
    return VLLMEndpoint(base_url=ep["base_url"], model=ep["model"], api_key_env=VLLM_KEY_ENV)


class PipelineTrainerConfig(LaunchConfig):
    follows: ClassVar[dict[str, str]] = SCHEDULE_FOLLOWS_STEPS
    moved: ClassVar[dict[str, str]] = {"max_lag": "trainer.max_lag"}

    model_path: str = Field(description="initial policy (e.g. the SFT model dir)")
    out_dir: str = Field("runs/pipeline_trainer", description="checkpoints and metrics")
    redis_block: str = Field(description="name of the RedisQueue block the actors write to")
    algorithm: AlgorithmConfig = Field(GRPOConfig(group_size=8), description="the actors' algorithm (its loss)")
    steps: int = bounded(20, ge=1, le=MAX_STEPS, description="optimizer steps")
    steps_per_stage: int = bounded(10, ge=1, le=MAX_STEPS, description="each stage ends in a checkpoint")
    items_per_step: int = bounded(256, ge=1, le=MAX_BATCH, description="SAW items (model calls) per optimizer step")
    trainer: TrainerConfig = Field(
        PIPELINE_TRAINER,
        description="optimisation settings (max_lag 1: older items are dropped at the queue); a partial mapping "
                    "changes only what it names; total_steps follows steps")
    endpoint_block: str | None = Field(None, description=_ENDPOINT)
    policy_dir: str = Field("runs/pipeline_trainer/policy", description="where to publish weights without a "
                                                                        "server (a directory the actors can read)")

    @model_validator(mode="after")
    def _lag_fits_reuse(self) -> PipelineTrainerConfig:
        check_max_lag(reuse_of(self.algorithm), self.trainer.max_lag)  # what the stage would refuse, refused now
        return self

    def preflight(self) -> None:
        from ludic_core.compose.build import check_algorithm

        require_model_dir("model_path", self.model_path)
        check_algorithm(self.algorithm)


@flow(name="pipeline_trainer")
def pipeline_trainer(cfg: PipelineTrainerConfig) -> dict:
    """Train on what the actors put on the stream; tell them when done."""
    with held(cfg.slot):  # runs naming the same slot never overlap
        return _pipeline_trainer(cfg)


def _pipeline_trainer(cfg: PipelineTrainerConfig) -> dict:
    from ludic_core.publish.directory import point_latest, read_latest
    from ludic_core.queue import SAWStream, connect

    cfg.preflight()
    start = time.perf_counter()
    endpoint = _endpoint(cfg.endpoint_block)
    with redis_queue(cfg.redis_block, cfg.out_dir, "", 0) as (url, password, key, backlog):
        stream = SAWStream(connect(url, password=password), key=key, max_backlog=backlog)
        stream.ensure_group()
        stream.clear_done()
        policy_dir = None if endpoint else cfg.policy_dir
        if policy_dir and read_latest(policy_dir) is None:
            point_latest(policy_dir, cfg.model_path, 0)
        base = StageSpec(model_path=cfg.model_path, checkpoint_dir=f"{cfg.out_dir}/checkpoints",
                         algorithm=cfg.algorithm, trainer=cfg.trainer, until_step=cfg.steps,
                         data=StreamData(url=url, key=key, items_per_step=cfg.items_per_step,
                                         password_env=KEY_ENV),
                         publish_dir=policy_dir, vllm=endpoint, metrics_path=f"{cfg.out_dir}/metrics.jsonl")
        stages = StageChain(base, cfg.steps, cfg.steps_per_stage, stream, launcher=cfg.launcher, nproc=cfg.nproc)
        while not stages.finished():  # then the stream is marked done: the actors stop
            time.sleep(0.2)
        final = verified_checkpoint(base.checkpoint_dir)
        report = queue_report(stream, final, [], 0, time.perf_counter() - start, base.metrics_path)
        stream.client.close()
    table_artifact("pipeline-trainer", [report], "pipeline trainer: items trained, dropped, dead-lettered")
    return {"model_path": str(final / "model"), **report}


class PipelineActorConfig(FlowConfig):
    redis_block: str = Field(description="name of the RedisQueue block the trainer reads")
    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    algorithm: AlgorithmConfig = Field(GRPOConfig(group_size=8),
                                       description="credit and filters; its group_size is the samples per prompt")
    requests_per_round: int = bounded(8, ge=1, le=MAX_BATCH, description="prompts per actor round")
    schedule: SeedSchedule = SeedSchedule(start=1_000)
    actors: int = bounded(2, ge=1, le=MAX_PROCESSES, description="rounds in flight at once in this flow run")
    actor_launch: ActorLaunch = ActorLaunch()
    rounds: int | None = bounded(None, ge=1, le=MAX_STEPS,
                                 description="stop after this many rounds; None = until the trainer is done")
    endpoint_block: str | None = Field(None, description=_ENDPOINT)
    tokenizer_path: str | None = Field(None, description="with a server: its model's dir (stamps the tokenizer)")
    policy_dir: str = Field("runs/pipeline_trainer/policy", description="where the trainer publishes (no server)")
    local: LocalInferenceConfig = LocalInferenceConfig()
    max_seq_len: int = bounded(512, ge=2, le=MAX_SEQ_LEN, description="tokens of one item (prompt and completion)")

    @model_validator(mode="after")
    def _group_size_stated(self) -> PipelineActorConfig:
        group_size_of(self.algorithm)
        return self

    def preflight(self) -> None:
        from ludic_core.compose.build import check_agent, check_algorithm, check_env

        check_env(self.env)
        check_agent(self.agent)
        check_algorithm(self.algorithm)


@flow(name="pipeline_actor", task_runner=ThreadPoolTaskRunner(max_workers=16))
def pipeline_actor(cfg: PipelineActorConfig) -> dict:
    """Play rounds onto the stream until the trainer says it is done (or `rounds`)."""
    from ludic_core.queue import SAWStream, connect

    cfg.preflight()
    endpoint = _endpoint(cfg.endpoint_block)
    with redis_queue(cfg.redis_block, "", "", 0) as (url, password, key, backlog):
        stream = SAWStream(connect(url, password=password), key=key, max_backlog=backlog)
        stream.ensure_group()
        actor = ActorSpec(env=cfg.env, agent=cfg.agent, algorithm=cfg.algorithm,
                          requests_per_round=cfg.requests_per_round, schedule=cfg.schedule, url=url, key=key,
                          max_backlog=backlog, policy_dir=None if endpoint else cfg.policy_dir, vllm=endpoint,
                          tokenizer_path=cfg.tokenizer_path, local=cfg.local, max_seq_len=cfg.max_seq_len,
                          password_env=KEY_ENV)
        rounds: list[dict] = []
        with actor_pool(cfg.actor_launch, cfg.actors) as pool:
            failed = keep_actors_busy(actor, stream, cfg.actors, stream.is_done, rounds, max_rounds=cfg.rounds,
                                      pool=pool)
        stream.client.close()
    out = {"rounds": len(rounds), "failed_rounds": failed, "items_produced": int(sum(r["added"] for r in rounds))}
    get_run_logger().info("actor run done: %s", out)
    return out
