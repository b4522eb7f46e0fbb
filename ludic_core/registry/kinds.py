"""What a component must declare before a config may call it.

A config names factories by import path and passes them keyword arguments, so
without this check `env: {name: "subprocess:getoutput", kwargs: {cmd: ...}}`
runs a shell command before anything notices it is not an env. Each kind
admits only objects that say what they build, read without calling them
(annotations are evaluated as `typing.get_type_hints` does: in the module's
namespace, the module's own code, which its import already ran):

- env:     a class subclassing `LudicEnv`, or a function (or method) annotated `-> SomeLudicEnv`;
- context: a class implementing `ContextStrategy`, or a function annotated to return one;
- credit:  a class implementing `CreditAssigner` (`compute`), or a function annotated to return one;
- loss:    a class with what `ludic_core.losses.Loss` asks (a `__call__`, and `needs_entropy` and
           `needs_actor_logprobs` declared on the class), or a function annotated to return one;
- parser:  a function annotated to return a parser (`-> Parser`, a callable returning `ParseResult`);
- policy:  a function annotated to return a policy (a callable returning `str`);
- tool:    a Python function, outside the standard library, with every parameter
           annotated (its annotations are the schema the model sees).

Anything else passes only when it carries `__ludic_<kind>__ = True` (e.g.
`__ludic_env__`), an explicit declaration for factories no annotation fits.
"""

from __future__ import annotations

import collections.abc
import inspect
import sys
import typing
from typing import Any, Callable

from ludic_core.context.base import ContextStrategy
from ludic_core.credit.base import CreditAssigner
from ludic_core.envs.base import LudicEnv
from ludic_core.parsers import ParseResult
from ludic_core.registry.errors import ComponentError

__all__ = ["check_kind"]


def _function(obj: Any) -> Any:
    """The Python function behind `obj` (a function, or a bound/class method), else None."""
    if inspect.ismethod(obj):
        obj = obj.__func__
    return obj if inspect.isfunction(obj) else None


def _return_annotation(obj: Any) -> Any:
    """The evaluated return annotation of a Python function, or None (absent or unreadable)."""
    fn = _function(obj)
    if fn is None:
        return None
    try:
        return inspect.get_annotations(fn, eval_str=True).get("return")
    except Exception:  # a forward reference that does not resolve: as good as none
        return None


def _is_class_of(ann: Any, base: type) -> bool:
    try:
        return isinstance(ann, type) and issubclass(ann, base)
    except TypeError:  # protocols with data members, generics
        return False


def _returns_callable_of(ann: Any, result: type) -> bool:
    """`ann` is `Callable[..., result]` (or an alias of it such as `Parser`)."""
    if typing.get_origin(ann) is not collections.abc.Callable:
        return False
    args = typing.get_args(ann)
    return bool(args) and _is_class_of(args[-1], result)


def _makes(is_kind: Callable[[Any], bool]) -> Callable[[Any], bool]:
    """A check that passes a class that `is_kind`, or a function annotated to return one."""
    return lambda obj: is_kind(obj if inspect.isclass(obj) else _return_annotation(obj))


def _subclass_of(base: type) -> Callable[[Any], bool]:
    return lambda cls: _is_class_of(cls, base)


#: what `ludic_core.losses.Loss` asks a loss to declare (read here without importing torch)
_LOSS_FLAGS = ("needs_entropy", "needs_actor_logprobs")


def _is_loss_class(cls: Any) -> bool:
    """A class that defines `__call__` and declares each of `_LOSS_FLAGS` (a class attribute,
    or an annotated field a dataclass sets), itself or in a base other than `object`."""
    if not inspect.isclass(cls):
        return False
    bases = [k for k in cls.__mro__ if k is not object]

    def declares(name: str) -> bool:
        return any(name in vars(k) or name in inspect.get_annotations(k) for k in bases)

    return declares("__call__") and all(declares(flag) for flag in _LOSS_FLAGS)


def _parser_ok(obj: Any) -> bool:
    return _returns_callable_of(_return_annotation(obj), ParseResult)


def _policy_ok(obj: Any) -> bool:
    return _returns_callable_of(_return_annotation(obj), str)


def _in_stdlib(obj: Any) -> bool:
    top = (getattr(obj, "__module__", None) or "builtins").partition(".")[0]
    return top in sys.stdlib_module_names or top == "builtins"


def _tool_ok(obj: Any) -> bool:
    fn = _function(obj)
    if fn is None or _in_stdlib(fn):
        return False
    try:
        params = inspect.signature(obj).parameters.values()
        hints = inspect.get_annotations(fn, eval_str=True)
    except Exception:
        return False
    return all(p.name in hints for p in params)


# kind -> (check, what passes, how to make it pass): both said in the error
_RULES: dict[str, tuple[Callable[[Any], bool], str, str]] = {
    "env": (_makes(_subclass_of(LudicEnv)), "a LudicEnv factory",
            "subclass LudicEnv, or annotate its return type as a LudicEnv subclass"),
    "context": (_makes(_subclass_of(ContextStrategy)), "a context factory",
                "implement ContextStrategy, or annotate its return type as one"),
    "credit": (_makes(_subclass_of(CreditAssigner)), "a credit assigner",
               "implement CreditAssigner: compute(rollouts) -> one weight per step of each rollout; or annotate "
               "a factory's return type as such a class"),
    "loss": (_makes(_is_loss_class), "a loss",
             "implement ludic_core.losses.Loss: __call__(inputs) -> LossOutputs, and needs_entropy and "
             "needs_actor_logprobs declared on the class as bools; or annotate a factory's return type as such a "
             "class"),
    "parser": (_parser_ok, "a parser factory", "annotate its return type as ludic_core.parsers.Parser"),
    "policy": (_policy_ok, "a policy factory", "annotate its return type as Callable[[list[Message]], str]"),
    "tool": (_tool_ok, "a tool", "a Python function outside the standard library, every parameter annotated"),
}


def _what(obj: Any) -> str:
    if inspect.isclass(obj):
        return f"a class ({obj.__module__}.{obj.__qualname__})"
    if _function(obj) is not None:
        return "a function"
    if inspect.isbuiltin(obj):
        return "a builtin function"
    return f"a {type(obj).__name__}"


def check_kind(kind: str, obj: Any, ref: str) -> None:
    """Raise ComponentError unless `obj` declares itself a `kind`; never calls `obj`."""
    check, noun, how = _RULES[kind]
    if inspect.getattr_static(obj, f"__ludic_{kind}__", False) is True or check(obj):
        return
    raise ComponentError(f"{kind} {ref!r} is {_what(obj)} that is not {noun} ({how}; or set "
                         f"__ludic_{kind}__ = True on it)")
