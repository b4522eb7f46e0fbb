"""Which reasoning-gym tasks an env draws from, and which entry a seed plays.

A `TaskMix` is the validated, hashable form of the env's `tasks` / `config` /
`size` / `seed` kwargs: a config from YAML or a Prefect form is checked here,
once, with an error naming the bad task, weight or field, before any episode.
The env is rebuilt per episode, so the datasets and their entries are cached
by mix (reasoning-gym's generators are deterministic in (seed, index), so a
cache hit is the same entry a fresh dataset would make).

Seeds: each task's dataset seed is a hash of (the mix's seed, the task), so
mixes with different `seed` share no entries by construction (reasoning-gym
seeds entry `i` of dataset seed `s` as `s + i`: consecutive seeds would
overlap almost entirely). The env seed then picks the task (weighted, its own
RNG) and the entry (`seed % size`).
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import json
import math
import numbers
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Mapping

from ludic_core.bounds import MAX_PROBLEMS, MAX_SEED

__all__ = ["TaskMix", "task_mix", "task_names", "dataset", "dataset_seed", "entry", "pick", "EVAL_SCORERS", "MAX_TASKS"]

MAX_TASKS = 1024  # tasks in one mix (reasoning-gym 0.1.25 has 106)

#: Tasks whose own `score_answer` (reasoning-gym 0.1.25) runs the answer text
#: through Python `eval` or sympy's `parse_expr` (itself an `eval`): the
#: policy's text would run as code in this process. Refused unless the env is
#: built with `allow_eval_scorers=True` (a policy you trust, never RL).
#: tests/envs/test_reasoning_gym.py keeps this list complete.
EVAL_SCORERS = frozenset({
    "binary_matrix", "n_queens", "spiral_matrix", "string_insertion",  # eval(answer)
    "countdown", "puzzle24", "polynomial_multiplication",  # sympy parse_expr(answer)
    "simple_integration", "intermediate_integration",
})

#: Mixing is this module's job; reasoning-gym's own mixer would bypass the checks here.
_NOT_TASKS = frozenset({"composite"})


def _rg() -> Any:
    try:
        import reasoning_gym
    except ImportError as exc:  # an optional extra: say how to get it
        raise ImportError("the reasoning_gym env needs the reasoning-gym package: "
                          "pip install 'ludic-prefect[reasoning-gym]'") from exc
    return reasoning_gym


def task_names() -> list[str]:
    """Every task reasoning-gym registers (its own names), sorted."""
    from_registry = _rg().factory.DATASETS
    return sorted(n for n in from_registry if n not in _NOT_TASKS)


@dataclass(frozen=True)
class TaskMix:
    """Validated task weights and per-task configs (JSON text, so the mix hashes)."""

    names: tuple[str, ...]
    weights: tuple[float, ...]
    configs: tuple[str, ...]  # one JSON object per task, keys sorted
    size: int
    seed: int

    def config(self, name: str) -> dict[str, Any]:
        return json.loads(self.configs[self.names.index(name)])


def _weights(tasks: Any) -> dict[str, float]:
    """`tasks` as {name: weight}: a name, a list of names (equal weights) or a mapping."""
    if isinstance(tasks, str):
        tasks = {tasks: 1.0}
    elif isinstance(tasks, (list, tuple)):
        dupes = sorted({t for t in tasks if isinstance(t, str) and tasks.count(t) > 1})
        if dupes:
            raise ValueError(f"reasoning_gym: tasks lists {dupes[0]!r} twice")
        tasks = {t: 1.0 for t in tasks}
    if not isinstance(tasks, Mapping) or not tasks:
        raise ValueError("reasoning_gym: tasks must be a task name, a list of names or {name: weight}, "
                         f"and not empty; got {tasks!r:.200}")
    if len(tasks) > MAX_TASKS:
        raise ValueError(f"reasoning_gym: {len(tasks):,} tasks; at most {MAX_TASKS:,}")
    out = {}
    for name, w in tasks.items():
        if not isinstance(name, str):
            raise ValueError(f"reasoning_gym: task names must be strings; got {name!r:.100}")
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w <= 0:
            raise ValueError(f"reasoning_gym: task {name!r:.100} has weight {w!r:.100}; "
                             "a weight must be a finite number > 0 (leave a task out to skip it)")
        out[name] = float(w)
    return out


def _check_name(name: str, known: list[str], allow_eval_scorers: bool) -> None:
    if name not in known:
        close = difflib.get_close_matches(name, known, n=3)
        hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
        raise ValueError(f"reasoning_gym: unknown task {name!r:.100}{hint} ({len(known)} tasks: "
                         "reasoning_gym.factory.DATASETS, or docs/envs/reasoning-gym.md)")
    if name in EVAL_SCORERS and not allow_eval_scorers:
        raise ValueError(f"reasoning_gym: task {name!r}: its score_answer runs the answer text through Python eval "
                         "(the policy's text would run as code in this process); set allow_eval_scorers: true "
                         "only for a policy you trust, never for RL")


def _configs(config: Any, names: list[str]) -> dict[str, dict[str, Any]]:
    if config is None:
        config = {}
    if not isinstance(config, Mapping):
        raise ValueError(f"reasoning_gym: config must map task name -> that task's settings; got {config!r:.200}")
    for name, cfg in config.items():
        if name not in names:
            raise ValueError(f"reasoning_gym: config names task {name!r:.100}, which is not in tasks {names}")
        if not isinstance(cfg, Mapping):
            raise ValueError(f"reasoning_gym: config[{name!r}] must be a mapping of the task's settings; "
                             f"got {cfg!r:.200}")
        owned = sorted({"seed", "size"} & set(cfg))
        if owned:
            raise ValueError(f"reasoning_gym: config[{name!r}] sets {owned[0]!r}; the env's own `seed` and `size` "
                             "decide every task's entries")
    return {n: dict(config.get(n, {})) for n in names}


def task_mix(tasks: Any, config: Any = None, *, size: int = 100_000, seed: int = 0,
             allow_eval_scorers: bool = False) -> TaskMix:
    """The env kwargs, checked: every task exists, weights are > 0, each config
    builds its dataset (reasoning-gym's own checks, with the task named)."""
    weights = _weights(tasks)
    if isinstance(size, bool) or not isinstance(size, int) or not 1 <= size <= MAX_PROBLEMS:
        raise ValueError(f"reasoning_gym: size must be an int in [1, {MAX_PROBLEMS:,}], got {size!r:.100}")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
        raise ValueError(f"reasoning_gym: seed must be an int in [0, {MAX_SEED}], got {seed!r:.100}")
    known = task_names()
    for name in weights:
        _check_name(name, known, allow_eval_scorers)
    names = list(weights)
    configs = _configs(config, names)
    try:
        texts = [json.dumps(configs[n], sort_keys=True, allow_nan=False) for n in names]
    except (TypeError, ValueError) as exc:
        raise ValueError(f"reasoning_gym: config must be plain JSON values ({exc})") from exc
    mix = TaskMix(tuple(names), tuple(weights[n] for n in names), tuple(texts), size, seed)
    for name in names:
        dataset(mix, name)  # reasoning-gym validates the task's config here
    return mix


def dataset_seed(seed: int, name: str) -> int:
    """Task `name`'s reasoning-gym dataset seed in a mix with seed `seed`."""
    digest = hashlib.sha256(f"reasoning_gym:{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


@lru_cache(maxsize=256)
def dataset(mix: TaskMix, name: str) -> Any:
    """Task `name`'s dataset in `mix`; a bad config is a ValueError naming the task."""
    cfg = mix.config(name)
    try:
        return _rg().create_dataset(name, **cfg, seed=dataset_seed(mix.seed, name), size=mix.size)
    except (TypeError, ValueError, AssertionError, KeyError) as exc:  # unknown field, or a failed validate()
        raise ValueError(f"reasoning_gym: task {name!r} rejects config {cfg!r:.300}: "
                         f"{type(exc).__name__}: {exc}") from exc


@lru_cache(maxsize=4096)  # rejection sampling: the env and the teacher read each entry once, close together
def _entry(mix: TaskMix, name: str, index: int) -> dict[str, Any]:
    return dataset(mix, name)[index]


def entry(mix: TaskMix, name: str, index: int) -> dict[str, Any]:
    """Entry `index` of task `name` (a copy: a scorer may not change the cached one)."""
    return copy.deepcopy(_entry(mix, name, index))


def pick(mix: TaskMix, seed: int) -> tuple[str, int]:
    """(task, entry index) an env seed plays: the task drawn by weight, the entry `seed % size`."""
    if len(mix.names) == 1:
        return mix.names[0], seed % mix.size
    rng = random.Random(f"reasoning_gym:pick:{mix.seed}:{seed}")
    return rng.choices(mix.names, weights=mix.weights)[0], seed % mix.size
