"""Pipeline RL: actor rounds and trainer stages at once, joined by a Redis Stream.

The synchronous `rl_train` alternates: generate, then train, then generate.
Here K actor rounds stay in flight (Prefect tasks, retried) while a training
stage consumes what they put on the stream; the stage publishes its weights
every step (a model directory the actors load, the embedded twin of a vLLM
push; with `inference: vllm` it pushes them into the actors' vLLM server) and
acknowledges items only once a checkpoint holds them. Nothing is
lost or trained twice across a crash of any part (see ludic_core.queue).
Items more than `trainer.max_lag` versions behind the trainer are dropped and counted.
"""

from __future__ import annotations

import contextvars
import json
import math
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any, Callable, ClassVar, Iterator, Literal

from prefect import flow, get_run_logger
from prefect.task_runners import ThreadPoolTaskRunner
from pydantic import Field, model_validator

from flows.common import SCHEDULE_FOLLOWS_STEPS, LaunchConfig, held, require_model_dir
from flows.vllm_inference import vllm_inference
from ludic_core.bounds import (MAX_BATCH, MAX_EPISODES, MAX_PROCESSES, MAX_QUEUE_ITEMS, MAX_SEED, MAX_STEPS,
                               bounded)
from ludic_core.compose.configs import BRANCH_HELP, AgentConfig, BranchConfig, EnvConfig, SeedSchedule
from ludic_core.compose.policy import ModelPolicy
from ludic_core.compose.serving import server_for_run
from ludic_core.config import (PIPELINE_TRAINER, AlgorithmConfig, GRPOConfig, LocalInferenceConfig, TrainerConfig,
                               VLLMConfig, check_max_lag, group_size_of, reuse_of)
from ludic_core.frozen import FrozenModel
from ludic_core.queue.actor import ActorSpec
from ludic_core.training.checkpoint import verified_checkpoint
from ludic_core.stages.spec import StageSpec, StreamData
from tasks.artifacts import adapters_artifact, learning_curve_artifact, table_artifact
from tasks.evaluation import evaluate_policy
from tasks.pipeline import actor_round_task
from tasks.training import train_stage

KEY_ENV = "LUDIC_REDIS_PASSWORD"


class ActorLaunch(FrozenModel):
    """Where actor rounds run. Threads share the flow's process (and its GIL)
    with the training stage; worker processes decode beside it for real."""

    mode: Literal["thread", "process"] = Field(
        "thread", description="thread = in the flow run's process; process = one long-lived worker process per "
                              "actor (a SIGKILLed worker fails its round, which is retried in a fresh one)")
    threads: int = bounded(1, ge=1, le=MAX_PROCESSES, description="torch threads per worker process (mode process)")


@contextmanager
def actor_pool(launch: ActorLaunch, actors: int) -> Iterator[str | None]:
    """The name of this run's actor process pool (closed on exit), or None for threads."""
    if launch.mode == "thread":
        yield None
        return
    from ludic_core.queue.actor_pool import ActorPool, registered

    with registered(ActorPool(actors, threads=launch.threads)) as pool:
        get_run_logger().info("actor rounds run in %d worker processes (%s)", actors, pool.name)
        yield pool.name


class PipelineRLConfig(LaunchConfig):
    follows: ClassVar[dict[str, str]] = SCHEDULE_FOLLOWS_STEPS
    moved: ClassVar[dict[str, str]] = {"max_lag": "trainer.max_lag"}

    model_path: str = Field(description="initial policy (e.g. the SFT model dir)")
    out_dir: str = Field("runs/pipeline_rl", description="checkpoints, published policies, metrics, local Redis")
    env: EnvConfig
    agent: AgentConfig = AgentConfig()
    algorithm: AlgorithmConfig = Field(GRPOConfig(group_size=8),
                                       description="its group_size is the samples per prompt (stated only here)")
    requests_per_round: int = bounded(8, ge=1, le=MAX_BATCH, description="prompts per actor round")
    schedule: SeedSchedule = Field(SeedSchedule(start=1_000), description="env seeds; each round plays its own")
    branch: BranchConfig | None = Field(None, description=BRANCH_HELP)
    actors: int = bounded(2, ge=1, le=MAX_PROCESSES, description="actor rounds in flight at once")
    actor_launch: ActorLaunch = ActorLaunch()
    steps: int = bounded(20, ge=1, le=MAX_STEPS, description="optimizer steps")
    steps_per_stage: int = bounded(10, ge=1, le=MAX_STEPS, description="each stage ends in a checkpoint")
    items_per_step: int = bounded(256, ge=1, le=MAX_BATCH, description="SAW items (model calls) per optimizer step")
    max_backlog: int | None = bounded(
        None, ge=0, le=MAX_QUEUE_ITEMS,
        description="actors wait while more than this many items are not yet read; None = items_per_step x "
                    "(trainer.max_lag // versions a step - 1), a step making the algorithm's reuse mini_batches x "
                    "epochs versions: a round generated on top of more would reach the trainer stale (2048 without "
                    "max_lag)")
    trainer: TrainerConfig = Field(
        PIPELINE_TRAINER,
        description="optimisation settings (max_lag 1: older items are dropped at the queue); a partial mapping "
                    "changes only what it names; total_steps follows steps")
    inference: Literal["local", "vllm"] = Field(
        "local", description="local = actors decode in-process from the published model directory; vllm = actors "
                             "roll out through a vLLM server the stages push their weights into, see `vllm`")
    vllm: VLLMConfig = Field(VLLMConfig(), description="the vLLM server (inference: vllm only)")
    local: LocalInferenceConfig = LocalInferenceConfig()
    redis_block: str | None = Field(None, description="name of a RedisQueue block; None = start a local "
                                                      "redis-server for the run (needs the binary)")
    key: str = Field("ludic:saw", description="the stream (a RedisQueue block's key wins)")
    eval_episodes: int = bounded(100, ge=0, le=MAX_EPISODES, description="greedy episodes at the end (0 = off)")
    eval_seed: int = bounded(100_000, ge=0, le=MAX_SEED, description="first env seed of that evaluation")

    @model_validator(mode="after")
    def _group_size_stated(self) -> PipelineRLConfig:
        group_size_of(self.algorithm)
        check_max_lag(reuse_of(self.algorithm), self.trainer.max_lag)  # what the stage would refuse, refused now
        if self.inference == "vllm":  # a LoRA run's adapters need a server with LoRA serving at its rank
            server_for_run(self.vllm.server, self.trainer.lora, self.vllm.lora)
        return self

    def preflight(self) -> None:
        from ludic_core.batching.branching import check_branching
        from ludic_core.compose.build import check_agent, check_algorithm, check_env
        from ludic_core.registry import resolve

        require_model_dir("model_path", self.model_path)
        check_env(self.env)
        check_agent(self.agent)
        check_algorithm(self.algorithm)
        if self.branch is not None:
            check_branching(self.env.name, resolve("env", self.env.name), group_size_of(self.algorithm))

    @property
    def backlog(self) -> int:
        """Items produced beyond this would be dropped as stale before the trainer reaches them: it
        reads `items_per_step` a step, and each step is `reuse.updates` policy versions."""
        if self.max_backlog is not None:
            return self.max_backlog
        lag = self.trainer.max_lag
        if lag is None:
            return 2048
        return min(self.items_per_step * max(lag // reuse_of(self.algorithm).updates - 1, 0), MAX_QUEUE_ITEMS)


@contextmanager
def redis_queue(block: str | None, out_dir: str, key: str, max_backlog: int) -> Iterator[tuple[str, str | None, str, int]]:
    """(url, password, stream key, max backlog): a RedisQueue block's, or a local
    server's started for this run (`block` None). The password is also put in
    the environment (`KEY_ENV`) where stages and actors read it, never a spec;
    it stays there (other flows of this process may be using the same queue)."""
    server = None
    if block:
        from blocks import RedisQueue

        conf = RedisQueue.load(block).to_config()
        url, password, key, max_backlog = conf["url"], conf["password"], conf["key"], conf["max_len"]
    else:
        from ludic_core.queue.redis_server import LocalRedis

        server = LocalRedis(Path(out_dir) / "redis").start()
        url, password = server.url, server.password
        get_run_logger().info("started redis-server at %s (append-only file in %s/redis)", url, out_dir)
    os.environ[KEY_ENV] = password or ""
    try:
        yield url, password, key, max_backlog
    finally:
        if server is not None:
            server.stop()


def keep_actors_busy(actor: ActorSpec, stream, n: int, until, rounds: list[dict], *,
                     max_rounds: int | None = None, pool: str | None = None) -> int:
    """Keep `n` actor rounds in flight until `until()` (or `max_rounds` were
    started), then let the running ones land. Round indices come from a Redis
    counter shared by every actor flow on the stream; rounds run in the worker
    processes of actor `pool` when one is named. Returns failed rounds."""
    in_flight: dict = {}
    since: dict = {}  # future -> when it was submitted, for the long-round warning
    started = failed = 0
    try:
        while not until():
            while len(in_flight) < n and (max_rounds is None or started < max_rounds):
                index = int(stream.client.incr(f"{stream.key}:rounds"))
                fut = actor_round_task.submit(actor, index, pool)
                in_flight[fut], since[fut] = index, time.monotonic()
                started += 1
            if not in_flight:
                break
            failed += _collect([f for f in in_flight if f.state.is_final()], in_flight, rounds)
            _warn_long_rounds(in_flight, since)
            time.sleep(0.05)
    finally:
        for fut in in_flight:  # let running rounds land (their items stay for the next run)
            fut.wait()
        failed += _collect(list(in_flight), in_flight, rounds)
    return failed


@flow(name="pipeline_rl", task_runner=ThreadPoolTaskRunner(max_workers=16))
def pipeline_rl(cfg: PipelineRLConfig) -> dict:
    """Returns the final model directory and the run's queue counts."""
    with held(cfg.slot):  # runs naming the same slot never overlap
        return _pipeline_rl(cfg)


def _pipeline_rl(cfg: PipelineRLConfig) -> dict:
    from ludic_core.publish.directory import point_latest, read_latest
    from ludic_core.queue import SAWStream, connect

    cfg.preflight()
    start = time.perf_counter()
    serving = (vllm_inference(cfg.vllm, cfg.model_path, launcher=cfg.launcher, nproc=cfg.nproc,
                              lora=cfg.trainer.lora)
               if cfg.inference == "vllm" else nullcontext((None, None)))
    with serving as (endpoint, run_one), redis_queue(cfg.redis_block, cfg.out_dir, cfg.key, cfg.backlog) as (
            url, password, key, backlog):
        stream = SAWStream(connect(url, password=password), key=key, max_backlog=backlog)
        stream.ensure_group()
        stream.clear_done()
        policy_dir = None if endpoint else f"{cfg.out_dir}/policy"
        if policy_dir and read_latest(policy_dir) is None:
            point_latest(policy_dir, cfg.model_path, 0)
        actor = ActorSpec(env=cfg.env, agent=cfg.agent, algorithm=cfg.algorithm, branch=cfg.branch,
                          requests_per_round=cfg.requests_per_round, schedule=cfg.schedule, url=url, key=key,
                          max_backlog=backlog, policy_dir=policy_dir, local=cfg.local, vllm=endpoint,
                          tokenizer_path=cfg.model_path if endpoint else None, max_seq_len=cfg.trainer.max_seq_len,
                          password_env=KEY_ENV)
        base = StageSpec(model_path=cfg.model_path, checkpoint_dir=f"{cfg.out_dir}/checkpoints",
                         algorithm=cfg.algorithm, trainer=cfg.trainer, until_step=cfg.steps,
                         data=StreamData(url=url, key=key, items_per_step=cfg.items_per_step,
                                         password_env=KEY_ENV),
                         publish_dir=policy_dir, vllm=endpoint, metrics_path=f"{cfg.out_dir}/metrics.jsonl",
                         local=cfg.local)
        rounds: list[dict] = []
        stages = StageChain(base, cfg.steps, cfg.steps_per_stage, stream, run_one=run_one, launcher=cfg.launcher,
                            nproc=cfg.nproc)
        with actor_pool(cfg.actor_launch, cfg.actors) as pool:
            failed_rounds = keep_actors_busy(actor, stream, cfg.actors, stages.finished, rounds, pool=pool)
        final = verified_checkpoint(base.checkpoint_dir)
        report = queue_report(stream, final, rounds, failed_rounds, time.perf_counter() - start, base.metrics_path)
        stream.client.close()
    table_artifact("pipeline-queue", [report], "pipeline RL: items produced, trained, dropped, dead-lettered")
    learning_curve_artifact("pipeline-learning-curve", base.metrics_path, fields=("loss", "queue_wait_s"))
    if base.vllm is not None and base.vllm.lora.publishes_adapters(base.trainer.lora):
        adapters_artifact(base.vllm.lora.directory(base.checkpoint_dir))
    result = {"model_path": str(final / "model"), **report}
    if cfg.eval_episodes:
        m = evaluate_policy(ModelPolicy(model_path=result["model_path"], local=cfg.local), cfg.env, cfg.agent,
                            seeds=list(range(cfg.eval_seed, cfg.eval_seed + cfg.eval_episodes)))
        result["eval"] = {k: round(v, 4) for k, v in m.items()}
        table_artifact("pipeline-evaluation", [result["eval"]], "greedy evaluation of the final checkpoint")
    return result


class StageChain:
    """Training stages submitted one after another (each a retried task ending
    in a checkpoint), polled from the actors' loop so actors never wait for a
    stage boundary. Stages whose checkpoint exists are skipped (a re-run resumes).
    With `run_one` (vllm_inference's: it restarts a dead server between
    attempts) a stage runs through it in a thread of this flow run instead.
    After the last one the stream is marked done, so waiting actors give up."""

    def __init__(self, base: StageSpec, steps: int, steps_per_stage: int, stream,
                 run_one: Callable[[StageSpec], dict] | None = None, launcher: str = "in_process",
                 nproc: int = 1) -> None:
        self.base = base
        self.launcher, self.nproc = launcher, nproc
        self.stream = stream
        self.run_one = run_one
        self.targets = list(range(steps_per_stage, steps, steps_per_stage)) + [steps]
        self.current: Any = None
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="stage") if run_one else None
        self._next()

    def _next(self) -> None:
        self.current = None
        while self.targets:
            target = self.targets.pop(0)
            done = _step_of(verified_checkpoint(self.base.checkpoint_dir))
            if done >= target:
                get_run_logger().info("stage up to step %d already done (checkpoint at %d), skipped", target, done)
                continue
            spec = self.base.model_copy(update={"until_step": target})
            if self._pool is None:
                self.current = train_stage.submit(spec, launcher=self.launcher, nproc=self.nproc)
            else:  # the flow run's context travels with it, so its task runs belong to this flow run
                self.current = self._pool.submit(contextvars.copy_context().run, self.run_one, spec)
            return

    def finished(self) -> bool:
        """True once every stage is done (then the stream says so, and actors stop);
        raises when one failed after its retries."""
        if self.current is not None and (self.current.done() if self._pool else self.current.state.is_final()):
            self.current.result()
            self._next()
        if self.current is None:
            self.stream.mark_done()
            if self._pool is not None:
                self._pool.shutdown()
        return self.current is None


#: An actor round running longer than this is named in the flow run's log once (a round
#: waits for room, loads the newest policy, decodes): a trainer starved of items then says why.
LONG_ROUND_S = 300.0


def _warn_long_rounds(in_flight: dict, since: dict) -> None:
    now = time.monotonic()
    for fut in [f for f in since if f not in in_flight]:
        del since[fut]
    for fut, t0 in list(since.items()):
        if now - t0 > LONG_ROUND_S:
            get_run_logger().warning("actor round %d has run for %.0f s (state %s): waiting for room on the "
                                     "stream, loading the policy or decoding", in_flight[fut], now - t0,
                                     fut.state.name)
            since[fut] = math.inf  # said once


def _collect(finished: list, in_flight: dict, rounds: list[dict]) -> int:
    """Move finished actor rounds out of `in_flight`; return how many failed."""
    failed = 0
    for fut in finished:
        index = in_flight.pop(fut)
        if fut.state.is_completed():
            rounds.append(fut.result())
        else:
            failed += 1
            get_run_logger().error("actor round %d failed after its retries: %s", index, fut.state.message)
    return failed


def _step_of(path: Path | None) -> int:
    return int(path.name.rsplit("_", 1)[-1]) if path is not None else 0


def queue_report(stream, final: Path | None, rounds: list[dict], failed_rounds: int, wall_s: float,
            metrics_path: str | None) -> dict:
    source = {}
    if final is not None:
        source = json.loads((final / "trainer_state.json").read_text())["data"].get("source", {})
    totals = source.get("totals", {})
    steps = []
    if metrics_path and Path(metrics_path).exists():
        steps = [json.loads(line) for line in Path(metrics_path).read_text().splitlines() if line.strip()]
    idle = sum(float(s.get("queue_wait_s", 0.0)) for s in steps)
    produced, backlog, pending = stream.tally()  # at one instant: an actor may still be adding
    return {
        "wall_s": round(wall_s, 1),
        "steps": len(steps),
        "rounds": sum(1 for r in rounds if not r.get("stopped")),
        "failed_rounds": failed_rounds,
        "items_produced": produced,
        "items_trained": int(totals.get("trained", 0)),
        "stale_dropped": stream.side_count(stream.dropped_key),
        "dead_lettered": stream.side_count(stream.dead_key),
        "left_in_stream": backlog + pending,  # unread, or read and not in a checkpoint
        "trainer_idle_s": round(idle, 1),
        "trainer_idle_frac": round(idle / max(wall_s, 1e-9), 3),
        "items_per_s": round(totals.get("trained", 0) / max(wall_s, 1e-9), 2),
        "lag_histogram": json.dumps(source.get("lag", {}), sort_keys=True),
    }
