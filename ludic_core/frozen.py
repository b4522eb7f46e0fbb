"""The one base for every config and spec model: frozen and `extra="forbid"`.

Configs arrive from YAML files, CLI flags, HTTP bodies and Prefect forms, so
  * `extra="forbid"`: a typo'd field fails validation, naming it, instead of
    being silently ignored (and its default silently used);
  * `frozen=True`: no config is mutated after parsing; what was validated is
    what runs (derive a changed copy with `model_copy(update=...)`);
  * `allow_inf_nan=False`: no float field takes NaN or infinity (`lr: .inf`
    passes `gt=0`, an unconstrained float takes `.nan`; either poisons a run).

Two rules make a config mean what it shows:
  * A partial mapping for a nested field is merged, field by field, over that
    field's default: `trainer: {lr: 0.001}` changes the lr and keeps every
    other value the owning model states for `trainer` (a flow's cosine schedule,
    not `TrainerConfig`'s class defaults). A mapping that names another kind
    (a different `type`/`kind` tag, or a different `merge_identity` value such
    as an env's `name`) replaces the default instead: its fields belong to
    another thing. A model instance always replaces (it was built whole).
  * `follows` names derived values: `{"trainer.total_steps": "steps"}` makes
    `trainer.total_steps` take `steps` unless it is given (null counts as not
    given), and a given value that disagrees is refused, naming both (`moved`
    refuses a field that moved, naming its new place). The JSON
    schema (Prefect's form, which sends every default back) leaves the derived
    value's default out, so a form never sends a stale one.

Upper bounds of sizes live in `ludic_core.bounds`.

Imports only pydantic, so configs load without torch or the pipeline layer.
"""

from __future__ import annotations

import functools
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, model_validator

__all__ = ["FrozenModel"]


class FrozenModel(BaseModel):
    """Base of every config/spec model: frozen, strict (`extra="forbid"`), finite floats;
    partial nested mappings merge over the field's default; `follows` keeps derived values in step."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    #: fields that say *which* thing this is (beside single-value Literal tags): a mapping naming
    #: another value replaces a default of this model instead of merging into it
    merge_identity: ClassVar[tuple[str, ...]] = ()
    #: derived value (a dotted path) -> the top-level field it follows: {"trainer.total_steps": "steps"}
    follows: ClassVar[dict[str, str]] = {}
    #: a field that moved -> where it lives now: {"max_lag": "trainer.max_lag"}; an old config
    #: naming it is refused with the new place (instead of "extra inputs are not permitted")
    moved: ClassVar[dict[str, str]] = {}

    @model_validator(mode="before")
    @classmethod
    def _merge_and_derive(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        for old, new in cls.moved.items():
            if old in data:
                raise ValueError(f"{old} moved to {new}: write it there")
        explicit = {path for path in cls.follows if _given(data, path.split("."))}
        out = dict(data)
        for name, field in cls.model_fields.items():
            if isinstance(out.get(name), Mapping) and isinstance(field.default, BaseModel):
                out[name] = _merged(field.default, out[name])
        for path, source in cls.follows.items():
            ok, value = _source(cls, out, source)
            if path in explicit or not ok:
                continue  # stated (checked once validated), or an invalid source (its own error speaks)
            head, *rest = path.split(".")
            node = out[head] if head in out else cls.model_fields[head].default
            out[head] = _with(node, rest, value) if rest else value
        return out

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: Any) -> Any:
        """The JSON schema (a Prefect form) shows no default for a derived value: a form
        sends every default back, and a stale one would then disagree with its source."""
        json_schema = handler(core_schema)
        properties = handler.resolve_ref_schema(json_schema).get("properties", {})
        for path in cls.follows:
            head, *rest = path.split(".")
            *keys, leaf = ["default", *rest]  # the value lives under the field's default
            node = properties.get(head)
            for key in keys:
                node = node.get(key) if isinstance(node, dict) else None
            if isinstance(node, dict):
                node.pop(leaf, None)
        return json_schema

    @model_validator(mode="after")
    def _derived_agree(self) -> FrozenModel:
        for path, source in self.follows.items():
            got, want = _attr(self, path.split(".")), _attr(self, source.split("."))
            if got is not None and got != want:
                raise ValueError(f"{path}={got} disagrees with {source}={want}: leave {path} out (it follows "
                                 f"{source}) or give both the same value")
        return self


def _identity(model: BaseModel) -> tuple[str, ...]:
    """Tags (single-value Literal fields, e.g. an algorithm's `type`) and `merge_identity`."""
    tags = tuple(name for name, f in type(model).model_fields.items()
                 if typing.get_origin(f.annotation) is typing.Literal and len(typing.get_args(f.annotation)) == 1)
    return tags + tuple(getattr(type(model), "merge_identity", ()))


def _merged(default: BaseModel, given: Mapping) -> Mapping:
    """`given` over `default`, field by field, recursing into nested models; `given`
    itself when it names another kind of thing than `default` is."""
    if any(key in given and given[key] != getattr(default, key) for key in _identity(default)):
        return given
    out: dict[str, Any] = {name: getattr(default, name) for name in type(default).model_fields}
    for key, value in given.items():
        current = out.get(key)
        out[key] = _merged(current, value) if isinstance(current, BaseModel) and isinstance(value, Mapping) else value
    return out


def _given(data: Any, path: list[str]) -> bool:
    """Whether the input states a value for `path` (a key of a mapping, or a field set on an
    instance); null counts as not stated, so forms and examples can show "follows" as null."""
    for key in path:
        if isinstance(data, Mapping):
            if key not in data:
                return False
            data = data[key]
        elif isinstance(data, BaseModel):
            if key not in data.model_fields_set:
                return False
            data = getattr(data, key)
        else:
            return False
    return data is not None


def _source(cls: type[BaseModel], data: Mapping, name: str) -> tuple[bool, Any]:
    """(valid, value) of top-level field `name` in the input, or its default where the input
    leaves it out; validated by the field's own rules, so an invalid source is not copied on."""
    if name not in data:
        return True, cls.model_fields[name].default
    try:
        return True, _adapter(cls, name).validate_python(data[name])
    except ValidationError:
        return False, None


@functools.cache
def _adapter(cls: type[BaseModel], name: str) -> TypeAdapter:
    field = cls.model_fields[name]
    annotation: Any = field.annotation  # a type, or a special form (a union, a Literal)
    return TypeAdapter(Annotated[(annotation, *field.metadata)] if field.metadata else annotation)


def _with(node: Any, path: list[str], value: Any) -> Any:
    """`node` (a mapping, or a model as the mapping of all its fields) with `path` set to `value`."""
    if isinstance(node, BaseModel):
        node = _merged(node, {})
    if not isinstance(node, Mapping):
        return node  # nothing to set it on: validation names what is wrong
    head, *rest = path
    return {**node, head: _with(node.get(head), rest, value) if rest else value}


def _attr(model: Any, path: list[str]) -> Any:
    for key in path:
        model = getattr(model, key, None)
    return model
