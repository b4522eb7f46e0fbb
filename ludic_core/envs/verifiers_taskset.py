"""`VerifiersTasksetEnv`: a `verifiers` (v1) taskset played by a ludic agent.

A verifiers environment is a taskset (config in, typed tasks out), a task's scoring
(`@vf.reward` / `@vf.metric` methods, plugged functions and judges) and a harness:
the program that talks to the model. Here the ludic agent stack is the harness, so
the episode runs through our rollout engine and trainer with our token traces and
log-probs (the model call is ours; nothing is re-tokenised). The env:

- loads the taskset the way `vf-eval` does (an installed package id such as
  "my-env", or an import path "pkg.module:MyTaskset") with its config;
- plays task `seed % len(tasks)`: its prompt is the observation, its system prompt
  the env's suggested one;
- takes the agent's reply (with the default `identity` parser, the reply itself),
  writes the conversation into a `vf.Trace` and scores it with the task's own
  `Task.score`; the reward is the trace's weighted total, each named reward and
  metric goes to the step's info.

It plays what verifiers' `null` harness plays: one chat completion per task, no
tools (verifiers would give a plain taskset its `bash` harness; no harness program
runs here). What needs more is refused when the env is built, naming the reason,
rather than scored wrongly: a taskset's own harness, tasks that need a runtime box
(containers, Prime sandboxes, `setup` / `finalize` hooks, signals that take a
`runtime`), tool servers, multi-agent `vf.Env`s and multi-message prompts. LLM
judges call the endpoint their `JudgeConfig` names, not our client.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import inspect
import json
from typing import Any, Iterable

from ludic_core.envs.base import LudicEnv
from ludic_core.envs.single_agent import DEFAULT_AGENT_ID
from ludic_core.types import StepOutcome

__all__ = ["VerifiersTasksetEnv", "UnsupportedTaskset", "load_tasks", "verifiers_metrics"]


class UnsupportedTaskset(ValueError):
    """The taskset needs a part of verifiers this adapter does not run (the message says which)."""


def _vf() -> Any:
    try:
        import verifiers.v1 as vf
    except ImportError as exc:  # an optional extra: the core does not need it
        raise ImportError("verifiers envs need the `verifiers` package: "
                          "pip install 'ludic-prefect[verifiers]'") from exc
    return vf


def _taskset_class(ref: str) -> tuple[type, bool]:
    """(Taskset class, whether `ref` is a verifiers package id) for an id or 'pkg.module:Class'."""
    vf = _vf()
    if ":" not in ref:
        from verifiers.v1.utils.loaders import taskset_class

        return taskset_class(ref), True
    module, _, name = ref.partition(":")
    cls = getattr(importlib.import_module(module), name, None)
    if not (isinstance(cls, type) and issubclass(cls, vf.Taskset)):
        raise UnsupportedTaskset(f"{ref!r} is not a verifiers.v1.Taskset subclass")
    return cls, False


def _overrides(task: Any, name: str) -> bool:
    return getattr(type(task), name) is not getattr(_vf().Task, name)


def _needs_runtime(fn: Any) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


def _check_task(task: Any, ref: str) -> None:
    """Refuse what this adapter cannot score faithfully (see the module docstring)."""
    what = f"verifiers taskset {ref!r}, task {type(task).__name__}"
    if task.NEEDS_CONTAINER:
        raise UnsupportedTaskset(f"{what} needs a container runtime (NEEDS_CONTAINER); not supported")
    for hook in ("setup", "finalize", "stage_verifier"):
        if _overrides(task, hook):
            raise UnsupportedTaskset(f"{what} defines `{hook}`, which prepares a runtime box; not supported")
    if type(task).toolsets(task.config):
        raise UnsupportedTaskset(f"{what} serves tools (Task.toolsets); tool servers are not supported")
    needy = [fn.__name__ for kind in ("reward", "metric") for fn in task.hooks(kind) if _needs_runtime(fn)]
    needy += [j.reward_name for j in task.plugged_judges() if _needs_runtime(j.score)]
    if needy:
        raise UnsupportedTaskset(f"{what}: signals {needy} need a runtime box; not supported")


def _check_taskset(cls: type, taskset: Any, ref: str, is_id: bool) -> None:
    if type(taskset).toolsets(taskset.config):
        raise UnsupportedTaskset(f"verifiers taskset {ref!r} serves shared tools (Taskset.toolsets); not supported")
    if is_id:
        from verifiers.v1.utils.loaders import default_harness_id, environment_class

        vf = _vf()
        if default_harness_id(ref) != "bash":
            raise UnsupportedTaskset(f"verifiers taskset {ref!r} ships its own harness program; not supported")
        env_cls = environment_class(ref)
        if env_cls is not vf.SingleAgentEnv:
            raise UnsupportedTaskset(f"verifiers taskset {ref!r} ships its own vf.Env ({env_cls.__name__}), whose "
                                     "episodes are more than one completion; not supported")


@functools.lru_cache(maxsize=8)
def _load(ref: str, config_json: str, limit: int | None) -> tuple[Any, ...]:
    from verifiers.v1.taskset import Taskset
    from verifiers.v1.utils.generic import concrete_type

    cls, is_id = _taskset_class(ref)
    config_cls = concrete_type(cls, _vf().TasksetConfig, origin=Taskset) or _vf().TasksetConfig
    raw = json.loads(config_json)
    if is_id:
        raw.setdefault("id", ref)
    taskset = cls(config_cls.model_validate(raw))
    _check_taskset(cls, taskset, ref, is_id)
    if limit is not None:
        taskset = taskset.take(limit)
    elif not taskset.bounded:
        raise UnsupportedTaskset(f"verifiers taskset {ref!r} is infinite: set `limit`")
    tasks = tuple(taskset)
    if not tasks:
        raise UnsupportedTaskset(f"verifiers taskset {ref!r} yielded no tasks")
    for task in {type(t): t for t in tasks}.values():
        _check_task(task, ref)
    for task in tasks:
        _prompt(task)  # a multi-turn prompt is refused now, not as a failed episode later
    return tasks


def load_tasks(taskset: str, taskset_config: dict[str, Any] | None = None, limit: int | None = None) -> tuple[Any, ...]:
    """The taskset's tasks, loaded once per (taskset, config, limit) in this process:
    the rollout engine builds an env per episode."""
    return _load(taskset, json.dumps(taskset_config or {}, sort_keys=True), limit)


def _prompt(task: Any) -> tuple[str | None, str]:
    """(system prompt, user prompt) of a task; a multi-turn prompt is refused."""
    vf, data = _vf(), task.data
    if isinstance(data.prompt, str):
        return data.system_prompt, data.prompt
    messages = list(data.prompt or [])
    system = [m for m in messages if isinstance(m, vf.SystemMessage)]
    users = [m for m in messages if isinstance(m, vf.UserMessage)]
    if len(users) != 1 or len(system) + len(users) != len(messages):
        raise UnsupportedTaskset(f"task {data.idx}: a prompt of {len(messages)} messages (roles "
                                 f"{[m.role for m in messages]}); only one user message, after an optional "
                                 "system message, is supported")
    from verifiers.v1.types import content_text

    sys_text = content_text(system[0].content) if system else data.system_prompt
    return sys_text, content_text(users[0].content)


class VerifiersTasksetEnv(LudicEnv):
    """One task of a verifiers taskset per episode, scored by the task's own rubric."""

    agent_ids = [DEFAULT_AGENT_ID]

    def __init__(self, taskset: str, taskset_config: dict[str, Any] | None = None, limit: int | None = None) -> None:
        self.ref = taskset
        self.tasks = load_tasks(taskset, taskset_config, limit)
        self.task: Any = None
        self._system: str | None = None
        self._prompt = ""

    @property
    def suggested_sysprompt(self) -> str | None:
        return self._system

    @staticmethod
    def episode_metrics(rollouts: Iterable[Any]) -> dict[str, float]:
        """Each named reward and metric, averaged over the episodes that scored it."""
        return verifiers_metrics(rollouts)

    def reset(self, seed: int | None = None) -> dict[str, tuple[str, dict[str, Any]]]:
        self.task = self.tasks[(seed or 0) % len(self.tasks)]
        self._system, self._prompt = _prompt(self.task)
        data = self.task.data
        return {DEFAULT_AGENT_ID: (self._prompt, {"task_idx": data.idx, "task_key": self.task.key, "task_id": data.id})}

    def active_agents(self) -> list[str]:
        return [] if self.task is None else [DEFAULT_AGENT_ID]

    async def step(self, actions: dict[str, str]) -> dict[str, StepOutcome]:
        """Score the reply; a coroutine because scoring may await (a judge), which the protocols do."""
        if self.task is None:
            raise RuntimeError("VerifiersTasksetEnv: no task in progress; call reset() first")
        if DEFAULT_AGENT_ID not in actions:
            raise KeyError(f"{type(self).__name__}.step needs an action for {DEFAULT_AGENT_ID!r}")
        trace = self._trace(actions[DEFAULT_AGENT_ID])
        async with asyncio.timeout(self.task.data.timeout.scoring):
            await self.task.score(trace)
        trace.is_completed = trace.ok = True
        info = {
            "task_idx": self.task.data.idx,
            "rewards": {k: None if r is None else r.score for k, r in trace.rewards.items()},
            "reward_weights": {k: r.weight for k, r in trace.rewards.items() if r is not None},
            "metrics": dict(trace.metrics),
        }
        self.task = None
        return {DEFAULT_AGENT_ID: StepOutcome(obs=None, reward=float(trace.reward), terminated=True, info=info)}

    def _trace(self, reply: str) -> Any:
        """The conversation as a verifiers trace (what its rubric reads)."""
        vf = _vf()
        from verifiers.v1.graph import prepare_turn
        from verifiers.v1.state import state_cls

        task = self.task
        trace = vf.Trace(task=vf.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
                         state=state_cls(type(task))(), agent=vf.AgentInfo(config=vf.AgentConfig(), name="ludic"))
        system = [vf.SystemMessage(content=self._system)] if self._system else []
        prompt = [*system, vf.UserMessage(content=self._prompt)]
        response = vf.Response(id="", created=0, model="ludic", message=vf.AssistantMessage(content=reply),
                               finish_reason="stop")
        prepare_turn(trace, prompt).commit(response)
        return trace


def verifiers_metrics(rollouts: Iterable[Any]) -> dict[str, float]:
    """`reward/<name>` and `metric/<name>`: means over the scored episodes."""
    sums: dict[str, list[float]] = {}
    for r in rollouts:
        info = r.steps[-1].info if r.steps else {}
        for group, prefix in (("rewards", "reward"), ("metrics", "metric")):
            for name, value in (info.get(group) or {}).items():
                if value is not None:
                    sums.setdefault(f"{prefix}/{name}", []).append(float(value))
    return {k: sum(v) / len(v) for k, v in sorted(sums.items())}
