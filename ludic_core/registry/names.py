"""Naming components in configs: a registered name or an import path.

A config names an env, a scripted policy, a tool, a parser, a context, a credit
assigner or a loss the way gymnasium's `make("pkg:Env")` does, so a user's code
in their own package runs from a YAML file or the Prefect UI without touching
this project:

- a bundled name (`tic_tac_toe`, `xml_tag`, `group_norm`, ...),
- a name a user package registers through a Python entry point, group
  `ludic.envs` / `ludic.policies` / `ludic.tools` / `ludic.parsers` /
  `ludic.contexts` / `ludic.credit` / `ludic.losses`
  (`[project.entry-points."ludic.envs"] my_env = "pkg.mod:MyEnv"`),
- or an import path `package.module:Attribute`.

Bundled entries are import paths too, so resolving one imports only what it
names. Resolving never calls what it finds: everything but a bundled entry
must first declare its kind (`ludic_core.registry.kinds`), so a config cannot
name `subprocess:getoutput` as an env and have it run. Every failure is a
`ComponentError` naming the value and the alternatives, raised before any
episode runs.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import re
from importlib.metadata import entry_points
from typing import Any, Callable, Literal, Mapping

from ludic_core.bounds import MAX_NAME_LEN
from ludic_core.registry.errors import ComponentError
from ludic_core.registry.kinds import check_kind

__all__ = ["ComponentError", "Kind", "BUNDLED", "registered", "resolve", "check_kwargs", "call_with_kwargs",
           "check_ref"]

Kind = Literal["env", "policy", "tool", "parser", "context", "credit", "loss"]

GROUPS: dict[str, str] = {"env": "ludic.envs", "policy": "ludic.policies", "tool": "ludic.tools",
                          "parser": "ludic.parsers", "context": "ludic.contexts", "credit": "ludic.credit",
                          "loss": "ludic.losses"}

BUNDLED: dict[str, dict[str, str]] = {
    "env": {
        "tic_tac_toe": "ludic_core.envs.tic_tac_toe.env:TicTacToeEnv",
        "tic_tac_toe_duel": "ludic_core.envs.tic_tac_toe.duel:TicTacToeDuelEnv",
        "arithmetic": "ludic_core.envs.arithmetic:ArithmeticEnv",
        "dataset_qa": "ludic_core.envs.dataset_file:dataset_qa_env",
        "code_exec": "ludic_core.envs.code_exec.env:CodeExecEnv",
        "reasoning_gym": "ludic_core.envs.reasoning_gym.env:ReasoningGymEnv",
        "textarena": "ludic_core.envs.textarena.env:TextArenaEnv",
        "textarena_vs_opponent": "ludic_core.envs.textarena.env:TextArenaOpponentEnv",
        "verifiers": "ludic_core.envs.verifiers_taskset:VerifiersTasksetEnv",
    },
    "policy": {
        "tic_tac_toe_minimax": "ludic_core.envs.tic_tac_toe.players:minimax_teacher",
        "tic_tac_toe_heuristic": "ludic_core.envs.tic_tac_toe.players:heuristic_teacher",
        "tic_tac_toe_random": "ludic_core.envs.tic_tac_toe.players:random_player",
        "arithmetic_oracle": "ludic_core.envs.arithmetic:arithmetic_oracle",
        "arithmetic_tool_teacher": "ludic_core.envs.arithmetic_tool_teacher:arithmetic_tool_teacher",
        "code_reference": "ludic_core.envs.code_exec.problems:reference_solver",
        "reasoning_gym_answer": "ludic_core.envs.reasoning_gym.teacher:reasoning_gym_answer",
        "textarena_random": "ludic_core.envs.textarena.players:textarena_random",
        "textarena_tic_tac_toe_minimax": "ludic_core.envs.textarena.players:textarena_tic_tac_toe_minimax",
    },
    "tool": {
        "calculator": "ludic_core.tools.calculator:calculator",
        "python": "ludic_core.tools.python_tool:python",
    },
    "parser": {
        "identity": "ludic_core.parsers:identity",
        "xml_tag": "ludic_core.parsers:xml_tag_parser",
        "think_prefix": "ludic_core.parsers:think_prefix_parser",
        "boxed": "ludic_core.parsers:boxed_parser",
        "code_block": "ludic_core.parsers:code_block_parser",
    },
    "context": {
        "full_dialog": "ludic_core.context:FullDialog",
        "sliding_window": "ludic_core.context:SlidingWindowContext",
        "truncated_thinking": "ludic_core.context:TruncatedThinkingContext",
    },
    # credit assigners and loss terms, by the module that holds each (`type: custom` algorithms)
    "credit": {
        "constant": "ludic_core.credit.constant:ConstantCredit",
        "episodic": "ludic_core.credit.episodic:EpisodicReturn",
        "monte_carlo": "ludic_core.credit.monte_carlo:MonteCarloReturn",
        "per_step": "ludic_core.credit.per_step:PerStepReward",
        "group_norm": "ludic_core.credit.group_norm:GroupNormalizedReturn",
        "turn_norm": "ludic_core.credit.turn_norm:TurnNormalizedReturn",
        "hybrid_norm": "ludic_core.credit.hybrid_norm:HybridNormalizedReturn",
    },
    "loss": {
        "clipped_surrogate": "ludic_core.losses.clipped_surrogate:ClippedSurrogateLoss",
        "gspo": "ludic_core.losses.gspo:GSPOLoss",
        "cispo": "ludic_core.losses.cispo:CISPOLoss",
        "reinforce": "ludic_core.losses.reinforce:ReinforceLoss",
        "reinforce_baseline": "ludic_core.losses.reinforce_baseline:ReinforceBaselineLoss",
        "cross_entropy": "ludic_core.losses.cross_entropy:MaskedCrossEntropyLoss",
        "kl": "ludic_core.losses.kl:TokenKLLoss",
        "distillation": "ludic_core.losses.distillation:OnPolicyDistillLoss",
        "distillation_top_k": "ludic_core.losses.distillation:TopKDistillLoss",
        "entropy": "ludic_core.losses.entropy:EntropyBonus",
    },
}

_NAME = re.compile(r"[A-Za-z_][\w.-]*")
_PATH = re.compile(r"[A-Za-z_][\w]*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")


def registered(kind: Kind) -> dict[str, str]:
    """name -> import path: the bundled entries, then the installed entry points
    (a user package may override a bundled name; the last installed wins)."""
    if kind not in GROUPS:
        raise ComponentError(f"unknown component kind {kind!r}; expected one of {sorted(GROUPS)}")
    names = dict(BUNDLED[kind])
    for ep in entry_points(group=GROUPS[kind]):
        names[ep.name] = ep.value
    return names


def check_ref(kind: Kind, ref: str) -> str:
    """Syntax only (no import): a config validates where the user's package is
    not installed (e.g. the Prefect server); `resolve` finds it at first use."""
    if isinstance(ref, str) and len(ref) > MAX_NAME_LEN:
        raise ComponentError(f"{kind} {ref[:60]!r}... is longer than {MAX_NAME_LEN:,} characters")
    if not isinstance(ref, str) or not (_PATH.fullmatch(ref) or _NAME.fullmatch(ref)):
        raise ComponentError(f"{kind} {ref!r} is neither a registered name nor an import path 'package.module:Name'")
    return ref


def _import(path: str, what: str) -> Any:
    module_name, _, attr = path.partition(":")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise ComponentError(f"{what}: cannot import module {module_name!r} ({exc})") from exc
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise ComponentError(f"{what}: module {module_name!r} has no attribute {attr!r}")
        obj = getattr(obj, part)
    return obj


def resolve(kind: Kind, ref: str) -> Any:
    """The object `ref` names (a registered name, else an import path), not
    called, and checked to be a `kind` unless it is a bundled entry."""
    check_ref(kind, ref)
    names = registered(kind)
    if ":" in ref:
        path, obj = ref, _import(ref, f"{kind} {ref!r}")
    elif ref in names:
        path, obj = names[ref], _import(names[ref], f"{kind} {ref!r} (registered as {names[ref]!r})")
    else:
        raise ComponentError(f"unknown {kind} {ref!r}; registered names: {sorted(names)} "
                             f"(or give an import path 'package.module:Name', or register one in "
                             f"the entry-point group {GROUPS[kind]!r})")
    if not callable(obj):
        raise ComponentError(f"{kind} {ref!r} resolves to a {type(obj).__name__}, not a class or function")
    if path not in BUNDLED[kind].values():  # bundled: this project's own code
        check_kind(kind, obj, ref)
    return obj


def call_with_kwargs(factory: Callable[..., Any], kwargs: Mapping[str, Any], what: str) -> Any:
    """`factory(**kwargs)`, with an unknown or missing keyword named before the call."""
    check_kwargs(factory, kwargs, what)
    return factory(**kwargs)


def check_kwargs(factory: Callable[..., Any], kwargs: Mapping[str, Any], what: str) -> None:
    """Raise ComponentError naming a keyword `factory` does not take or needs; calls nothing."""
    try:
        shape = _keywords(factory)
    except TypeError:  # unhashable: no cache
        shape = _keywords.__wrapped__(factory)
    if shape is None:  # builtins without a signature: let the call speak
        return
    named, required, takes_any = shape
    unknown = [k for k in kwargs if k not in named]
    if unknown and not takes_any:
        raise ComponentError(f"{what} takes no parameter {unknown[0]!r}; its parameters: {list(named)}")
    missing = [n for n in required if n not in kwargs]
    if missing:
        raise ComponentError(f"{what} needs parameter {missing[0]!r} in its kwargs")


@functools.lru_cache(maxsize=1024)
def _keywords(factory: Callable[..., Any]) -> tuple[tuple[str, ...], tuple[str, ...], bool] | None:
    """(the keywords `factory` takes, those without a default, whether it takes **kwargs), or None
    without a signature. Cached: every episode builds its env, agent and parser through
    `call_with_kwargs`, and `inspect.signature` cost ~4% of a CPU GRPO step's main thread."""
    try:
        params = inspect.signature(factory).parameters
    except (TypeError, ValueError):
        return None
    named = tuple(n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))
    required = tuple(n for n in named if params[n].default is inspect.Parameter.empty)
    return named, required, any(p.kind is p.VAR_KEYWORD for p in params.values())
