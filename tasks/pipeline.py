"""Pipeline-RL tasks: an actor round (retried; many at once)."""

from __future__ import annotations

from prefect import get_run_logger, task
from prefect.cache_policies import NO_CACHE

from ludic_core.queue.actor import ActorSpec, run_actor_round
from ludic_core.queue.actor_pool import get_pool
from tasks.retries import retry_unless_stopping


@task(name="actor-round", cache_policy=NO_CACHE, retries=2, retry_delay_seconds=1,
      retry_condition_fn=retry_unless_stopping)
def actor_round_task(spec: ActorSpec, round_index: int, pool: str | None = None) -> dict[str, float]:
    """One round of rollouts -> credit -> the stream, in this thread or in a
    worker process of the flow run's actor `pool`. A retry reuses the round
    index, so a round whose first attempt landed is not written twice."""
    out = get_pool(pool).run(spec, round_index) if pool else run_actor_round(spec, round_index)
    if out.get("stopped"):
        get_run_logger().info("round %d: training is over, nothing played", round_index)
        return out
    get_run_logger().info("round %d: %d items from policy v%d (%.1f s generating, %.1f s waiting for room)",
                          round_index, out["added"], out["policy_version"], out["generate_s"], out["wait_s"])
    return out
