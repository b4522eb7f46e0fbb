"""Tool plumbing for tool-using agents: schemas, call extraction, execution.

Tools are plain Python functions; their signature and docstring *are* the
schema, so there is no second description to drift out of date. Every failure
(unknown tool, bad JSON, bad arguments, a raising tool) becomes an `Error: ...`
string for the model to read, because in RL a malformed call is a policy
mistake to learn from, not a crash.
"""

from __future__ import annotations

import inspect
import json
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, Literal, Union

from ludic_core.types import ChatResponse

__all__ = [
    "ToolCall",
    "function_schema",
    "extract_tool_calls",
    "strip_tool_call_blocks",
    "run_tool",
]

_JSON_TYPES: dict[Any, str] = {
    int: "integer",
    float: "number",
    str: "string",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}
_HERMES = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.DOTALL)


@dataclass
class ToolCall:
    """One requested call; `error` is set when it could not even be decoded."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    error: str | None = None

    def to_message_entry(self) -> dict[str, Any]:
        """OpenAI-style entry for the assistant message's "tool_calls"."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


# ---------------------------------------------------------------- schemas


def _type_schema(tp: Any) -> dict[str, Any]:
    """JSON schema for a type hint; unknown hints give `{}` (any value)."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp in _JSON_TYPES:
        return {"type": _JSON_TYPES[tp]}
    if origin in (Union, types.UnionType):
        inner = [a for a in args if a is not type(None)]
        if len(inner) == 1:
            return _type_schema(inner[0])
        return {"anyOf": [_type_schema(a) for a in inner]}
    if origin is Literal:
        return {"enum": list(args)}
    if origin in (list, tuple, set, frozenset):
        schema: dict[str, Any] = {"type": "array"}
        if args:
            schema["items"] = _type_schema(args[0])
        return schema
    if origin is dict:
        return {"type": "object"}
    return {}


def _docstring_parts(doc: str | None) -> tuple[str, dict[str, str]]:
    """(summary, {param: description}) from a Google-style docstring."""
    text = inspect.cleandoc(doc or "")
    summary = text.split("\n\n", 1)[0].replace("\n", " ").strip()
    params: dict[str, str] = {}
    in_args = False
    for line in text.splitlines():
        stripped = line.strip()
        if stripped in ("Args:", "Arguments:", "Parameters:"):
            in_args = True
            continue
        if in_args:
            m = re.match(r"^(\w+)\s*(?:\([^)]*\))?\s*:\s*(.+)$", stripped)
            if m:
                params[m.group(1)] = m.group(2).strip()
            elif stripped and not line.startswith((" ", "\t")):
                in_args = False
    return summary, params


def function_schema(fn: Callable[..., Any]) -> dict[str, Any]:
    """OpenAI tool schema `{"type": "function", "function": {...}}` for `fn`."""
    name = getattr(fn, "__name__", None)
    if not name or not name.isidentifier():
        raise ValueError(f"tool {fn!r} needs a valid __name__ (lambdas and partials are not allowed)")
    try:
        hints = typing.get_type_hints(fn)
    except Exception as exc:  # unresolved forward refs etc.
        raise ValueError(f"tool {name!r}: cannot resolve type hints: {exc}") from exc
    summary, param_docs = _docstring_parts(fn.__doc__)
    properties: dict[str, Any] = {}
    required: list[str] = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise ValueError(f"tool {name!r}: *args/**kwargs cannot be described as a schema")
        prop = _type_schema(hints.get(p.name, Any))
        if p.name in param_docs:
            prop["description"] = param_docs[p.name]
        properties[p.name] = prop
        if p.default is p.empty:
            required.append(p.name)
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": summary,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


# ---------------------------------------------------------------- extraction


def _decode_arguments(raw: Any, name: str) -> tuple[dict[str, Any], str | None]:
    if raw is None or raw == "":
        return {}, None
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, a 5000-digit int, '[' * 5000
            return {}, f"Error: malformed JSON in arguments for tool {name!r}: {exc}"
    if not isinstance(raw, dict):
        return {}, f"Error: arguments for tool {name!r} must be a JSON object, got {type(raw).__name__}"
    return raw, None


def _from_structured(entries: list[dict[str, Any]], id_prefix: str) -> list[ToolCall]:
    calls = []
    for i, entry in enumerate(entries):
        entry = entry if isinstance(entry, dict) else {}
        fn = entry.get("function")
        call_id = str(entry.get("id") or f"{id_prefix}{i}")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
            calls.append(ToolCall(call_id, "unknown", error="Error: tool call has no function name"))
            continue
        args, err = _decode_arguments(fn.get("arguments"), fn["name"])
        calls.append(ToolCall(call_id, fn["name"], args, err))
    return calls


def _from_hermes(text: str, id_prefix: str) -> list[ToolCall]:
    calls = []
    for i, block in enumerate(_HERMES.findall(text)):
        call_id = f"{id_prefix}{i}"
        try:
            obj = json.loads(block.strip())
        except (ValueError, RecursionError) as exc:  # JSONDecodeError, a 5000-digit int, '[' * 5000
            err = f"Error: malformed JSON in <tool_call> block: {exc}"
            calls.append(ToolCall(call_id, "unknown", error=err))
            continue
        if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
            err = 'Error: <tool_call> must hold {"name": <str>, "arguments": {...}}'
            calls.append(ToolCall(call_id, "unknown", error=err))
            continue
        args, arg_err = _decode_arguments(obj.get("arguments"), obj["name"])
        calls.append(ToolCall(call_id, obj["name"], args, arg_err))
    return calls


def extract_tool_calls(response: ChatResponse, *, id_prefix: str = "call_") -> list[ToolCall]:
    """Calls from `response.tool_calls` if the backend parsed them, else Hermes blocks.

    A trailing unclosed `<tool_call>` counts as a block: a `</tool_call>` stop
    string is removed from the text by the backend.
    """
    if response.tool_calls:
        return _from_structured(response.tool_calls, id_prefix)
    return _from_hermes(response.text, id_prefix)


def strip_tool_call_blocks(text: str) -> str:
    """Text without Hermes blocks, so a chat template re-rendering "tool_calls" does not duplicate them."""
    return _HERMES.sub("", text).strip()


# ---------------------------------------------------------------- execution


def _check_types(fn: Callable[..., Any], bound: inspect.BoundArguments) -> str | None:
    """Basic JSON-type check so `"2"` for an int fails clearly, before the tool runs."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:
        return None
    for pname, value in bound.arguments.items():
        tp = hints.get(pname)
        expected = {int: (int,), float: (int, float), str: (str,), bool: (bool,)}.get(tp) if tp is not None else None
        if expected is None:
            continue
        if not isinstance(value, expected) or (tp is not bool and isinstance(value, bool)):
            return f"argument {pname!r} must be {_JSON_TYPES[tp]}, got {type(value).__name__} {value!r}"
    return None


def _format_result(result: Any) -> str:
    if isinstance(result, (dict, list)):
        try:
            return json.dumps(result)
        except (TypeError, ValueError):
            return str(result)
    return str(result)


async def run_tool(tools: dict[str, Callable[..., Any]], call: ToolCall) -> tuple[bool, str]:
    """Run `call`; return (ok, content for the tool message). Never raises."""
    if call.error is not None:
        return False, call.error
    fn = tools.get(call.name)
    if fn is None:
        available = ", ".join(sorted(tools)) or "none"
        return False, f"Error: unknown tool {call.name!r}; available tools: {available}"
    try:
        bound = inspect.signature(fn).bind(**call.arguments)
    except TypeError as exc:
        return False, f"Error: bad arguments for tool {call.name!r}: {exc}"
    type_error = _check_types(fn, bound)
    if type_error is not None:
        return False, f"Error: bad arguments for tool {call.name!r}: {type_error}"
    try:
        result = fn(*bound.args, **bound.kwargs)
        if inspect.isawaitable(result):
            result = await result
    except Exception as exc:
        return False, f"Error: tool {call.name!r} raised {type(exc).__name__}: {exc}"
    return True, _format_result(result)
