"""Upper bounds of every config number that sizes memory or time, stated once.

Configs come from YAML files and Prefect forms, so `episodes: 1e12` must fail
validation (naming the field) rather than start a run that dies allocating a
list of seeds or fills RAM. Each bound is generous, far above any run a user
means, and finite. `bounded` puts the bound in the field's description too,
so the Prefect UI form and `ludic run FLOW --example` show it. Imports only
pydantic: configs load without torch.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

__all__ = ["MAX_STEPS", "MAX_EPISODES", "MAX_PROBLEMS", "MAX_GROUP", "MAX_BATCH", "MAX_SEQ_LEN", "MAX_TOKEN_BUDGET",
           "MAX_CONCURRENCY", "MAX_PROCESSES", "MAX_NODES", "MAX_TURNS", "MAX_ATTEMPTS", "MAX_DRAWS",
           "MAX_CHECKPOINTS", "MAX_SECONDS", "MAX_BUCKET_MB", "MAX_KV_CACHE_GIB", "MAX_LORA_RANK",
           "MAX_QUEUE_ITEMS", "MAX_SEED", "MAX_STRIDE", "MAX_NAME_LEN", "MAX_CONFIG_BYTES", "MAX_CONFIG_NODES",
           "bounded"]

MAX_STEPS = 10_000_000  # optimizer steps, stage lengths, warmup/decay, checkpoint spacing, staleness, actor rounds
MAX_EPISODES = 10_000_000  # episodes or prompts one run plays (evaluation, rejection sampling), in total
MAX_PROBLEMS = 1_000_000  # problems an env generates up front (arithmetic's `n`), kept in memory
MAX_GROUP = 1024  # samples per prompt (group_size, samples)
MAX_BATCH = 65_536  # prompts or items per step / round, SFT batch size, groups per step
MAX_SEQ_LEN = 1_048_576  # tokens in one sequence (max_seq_len, max_tokens, max_model_len)
MAX_TOKEN_BUDGET = 16_777_216  # tokens processed together (micro-batch budget, log-prob chunk, vLLM batch)
MAX_CONCURRENCY = 4096  # requests decoded together in one batch
MAX_PROCESSES = 1024  # ranks per node, actor rounds in flight (worker processes), threads per worker
MAX_NODES = 4096  # machines in one torchrun job
MAX_TURNS = 10_000  # agent turns per episode, parse failures in a row
MAX_ATTEMPTS = 100  # tries of one stage
MAX_DRAWS = 1000  # request batches drawn per step (dynamic sampling)
MAX_CHECKPOINTS = 10_000  # checkpoints kept on disk
MAX_SECONDS = 604_800  # any timeout: one week
MAX_BUCKET_MB = 65_536  # one weight-push bucket: 64 GiB
MAX_KV_CACHE_GIB = 4096  # vLLM CPU KV cache
MAX_LORA_RANK = 4096
MAX_QUEUE_ITEMS = 10_000_000  # items waiting in a Redis stream
# Seeds stay below 2**63 (torch and the token sampler take int64) even after
# MAX_EPISODES strides of MAX_STRIDE are added to the largest start.
MAX_SEED = 2**62
MAX_STRIDE = 2**32
MAX_NAME_LEN = 1024  # a component name or import path
MAX_CONFIG_BYTES = 16 * 2**20  # a config file `ludic run --config` reads
MAX_CONFIG_NODES = 1_000_000  # values in a loaded config, YAML aliases expanded (a "billion laughs" file)


def bounded(default: Any = ..., *, le: int, description: str = "", **constraints: Any) -> Any:
    """`Field(default, le=le, ...)` with "at most LE" appended to its description."""
    limit = f"at most {le:,}"
    return Field(default, le=le, description=f"{description}; {limit}" if description else limit, **constraints)
