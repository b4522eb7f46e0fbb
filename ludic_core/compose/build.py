"""Configs -> objects: envs, agents, engines and requests for any env.

The one place where an `EnvConfig` / `AgentConfig` meets code, so every flow
builds its rollouts the same way and a bad name or keyword fails here, naming
it, before any model call.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any, Callable, Sequence

from ludic_core.agents import Agent, ToolAgent
from ludic_core.algorithms import AlgorithmConfig
from ludic_core.compose.configs import AgentConfig, ComponentConfig, EnvConfig
from ludic_core.compose.policy import seeded_policy
from ludic_core.envs.base import LudicEnv
from ludic_core.inference.sampling import InferenceSpec, SamplingConfig
from ludic_core.interaction import MultiAgentProtocol, SingleAgentSyncProtocol
from ludic_core.registry import ComponentError, call_with_kwargs, resolve
from ludic_core.rollout import ProtocolSpec, RolloutEngine, RolloutRequest

__all__ = ["env_factory", "check_env", "check_agent", "check_algorithm", "agent_factory", "build_agent",
           "build_engine", "episode_requests", "PROTOCOL"]

#: The engine's protocol key for agents built from an AgentConfig.
PROTOCOL = "agent"


def env_factory(cfg: EnvConfig) -> Callable[..., Any]:
    """The env's class or factory, wrapped so a wrong keyword is named. A factory
    with a `policies` parameter (an env with scripted seats) gets the registry's
    `PolicyResolver`: the env names policies, this layer finds them."""
    factory = resolve("env", cfg.name)
    inject = {"policies": seeded_policy} if _takes(factory, "policies") else {}

    def make(**kwargs: Any) -> Any:
        return call_with_kwargs(factory, {**kwargs, **inject}, f"env {cfg.name!r}")

    make.episode_metrics = getattr(factory, "episode_metrics", None)  # type: ignore[attr-defined]
    return make


def _takes(factory: Callable[..., Any], name: str) -> bool:
    try:
        return name in inspect.signature(factory).parameters
    except (TypeError, ValueError):  # no signature: it takes nothing we could pass
        return False


def check_env(cfg: EnvConfig) -> None:
    """Build the env once (resolves the name, checks its kind and kwargs), so a
    config error surfaces when a flow starts rather than as N failed episodes.
    Whatever the env raises on bad kwargs becomes a ComponentError naming it."""
    make = env_factory(cfg)  # resolved and kind-checked: nothing was called yet
    try:
        env = make(**cfg.kwargs)
    except ComponentError:
        raise
    except Exception as exc:
        raise ComponentError(f"env {cfg.name!r} failed to build from its kwargs: {type(exc).__name__}: {exc}") from exc
    if not isinstance(env, LudicEnv):
        raise ComponentError(f"env {cfg.name!r} built a {type(env).__name__}, not a LudicEnv")


def check_algorithm(cfg: AlgorithmConfig) -> None:
    """Build the algorithm once, so a custom one's credit and loss resolve, pass their kind
    checks and take their kwargs when a flow starts, not in its first training stage; a
    distillation teacher's model dir must exist (a server is checked when the stage starts)."""
    built = cfg.build()
    teacher = cfg.teacher_spec()
    if built.requires_teacher and teacher is None:
        raise ValueError(f"algorithm {cfg.type!r}: its loss reads a distillation teacher's log-probs "
                         "(needs_teacher_logprobs): name one in algorithm.teacher (a model_path or a base_url)")
    if built.teacher_top_k is not None and teacher is not None and teacher.base_url is not None:
        raise ValueError(f"algorithm {cfg.type!r}: its loss reads the teacher's top {built.teacher_top_k} tokens at "
                         "each position, which a vLLM teacher (algorithm.teacher.base_url) does not give here: name "
                         "an in-process teacher (algorithm.teacher.model_path)")
    if teacher is not None and teacher.model_path is not None:
        path = Path(teacher.model_path)
        if not ((path / "config.json").is_file() or (path / "adapter_config.json").is_file()):
            raise FileNotFoundError(f"algorithm.teacher.model_path: {teacher.model_path!r} is not a model directory "
                                    "(no config.json in it)")


def check_agent(cfg: AgentConfig) -> None:
    """Build an agent once (no client): its parser, context and tools resolve,
    pass their kind checks and take their kwargs, before a flow starts."""
    try:
        agent_factory(cfg)(None)
    except ComponentError:
        raise
    except Exception as exc:
        raise ComponentError(f"agent: {type(exc).__name__}: {exc}") from exc


def _component_factory(kind: str, cfg: ComponentConfig) -> Callable[[], Any]:
    factory = resolve(kind, cfg.name)  # type: ignore[arg-type]
    return lambda: call_with_kwargs(factory, cfg.kwargs, f"{kind} {cfg.name!r}")


def agent_factory(cfg: AgentConfig) -> Callable[[Any], Any]:
    """client -> a fresh Agent (a ToolAgent when tools are named). Names are
    resolved once, here: resolving scans the installed entry points, which cost
    90% of a scripted teacher's episode when it was done per agent."""
    make_parser, make_context = _component_factory("parser", cfg.parser), _component_factory("context", cfg.context)
    tools = [resolve("tool", t) for t in cfg.tools]

    def make(client: Any) -> Any:
        if tools:
            return ToolAgent(client, tools=tools, parser=make_parser(), context=make_context())
        return Agent(client, parser=make_parser(), context=make_context())

    return make


def build_agent(cfg: AgentConfig, client: Any) -> Any:
    """An Agent (a ToolAgent when tools are named) over `client`."""
    return agent_factory(cfg)(client)


def build_engine(env: EnvConfig, agent: AgentConfig, client: Any, *, jsonl_path: str | None = None,
                 max_concurrency: int = 256) -> RolloutEngine:
    """An engine that plays `env` with agents over `client` (one protocol per episode)."""
    make_env, make_agent = env_factory(env), agent_factory(agent)
    seats: list[str] = []  # the env's agent ids, read from the first env built

    def protocol() -> Any:
        if not seats:
            seats.extend(make_env(**env.kwargs).agent_ids)
        if len(seats) == 1:
            return SingleAgentSyncProtocol(make_agent(client), system_prompt=agent.system_prompt,
                                           max_parse_failures=agent.max_parse_failures)
        # a multi-agent env: every seat is played by the same policy, each with its own dialog
        return MultiAgentProtocol({a: make_agent(client) for a in seats},
                                  system_prompt=agent.system_prompt, max_parse_failures=agent.max_parse_failures)

    return RolloutEngine({env.name: make_env}, {PROTOCOL: protocol}, jsonl_path=jsonl_path,
                         max_concurrency=max_concurrency)


def episode_requests(env: EnvConfig, agent: AgentConfig, seeds: Sequence[int], *,
                     sampling: SamplingConfig | None = None) -> list[RolloutRequest]:
    """One request per env seed; the sampling seed follows the env seed so a run repeats exactly."""
    spec = InferenceSpec(sampling=sampling or agent.sampling)
    return [RolloutRequest(env=env, protocol=ProtocolSpec(kind=PROTOCOL),
                           env_seed=s, sampling_seed=s, inference=spec) for s in seeds]
