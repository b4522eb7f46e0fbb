"""Reading a flow's config file for `ludic run`, and validating it into the flow's model.

Hostile by default: every way a file can be bad (missing, a directory, a FIFO,
too big, not UTF-8, bad syntax, nested too deep, a YAML alias bomb, not a
mapping) and every invalid field is one ValueError line naming the file and
the field, which `ludic` prints without a traceback.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["read_config_file", "validated"]


def read_config_file(path: str) -> dict:
    """The mapping in a YAML (.yaml/.yml) or JSON file. Every way a file can be
    bad (missing, a directory, a device, unreadable, too big, not UTF-8, bad
    syntax, nested too deep, a YAML alias bomb, not a mapping) is a ValueError
    naming it, which `main` prints as one line: never a traceback."""
    text = _read_text(path)
    try:
        if path.endswith((".yaml", ".yml")):
            import yaml

            try:
                data = yaml.safe_load(text)
            except yaml.MarkedYAMLError as exc:
                mark = exc.problem_mark or exc.context_mark
                where = f"{path}:{mark.line + 1}:{mark.column + 1}" if mark else path
                raise ValueError(f"{where}: invalid YAML: {exc.problem or exc.context}") from None
            except yaml.YAMLError as exc:
                raise ValueError(f"{path}: invalid YAML: {exc}") from None
            data = {} if data is None else data
        else:
            try:
                data = json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{path}:{exc.lineno}:{exc.colno}: invalid JSON: {exc.msg}") from None
    except RecursionError:
        raise ValueError(f"{path}: nested too deeply") from None
    except ValueError as exc:  # e.g. an integer literal of more than 4300 digits
        raise ValueError(str(exc) if str(exc).startswith(path) else f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a flow config must be a mapping, got {type(data).__name__}")
    _check_size(data, path)
    return data


def _read_text(path: str) -> str:
    """At most MAX_CONFIG_BYTES of a regular file, decoded (never a FIFO or /dev/zero)."""
    from ludic_core.bounds import MAX_CONFIG_BYTES

    p = Path(path)
    try:
        if not p.exists():
            raise ValueError(f"config file {path}: no such file")
        if p.is_dir():
            raise ValueError(f"config file {path} is a directory, not a file")
        if not p.is_file():
            raise ValueError(f"config file {path} is not a regular file")
        with p.open("rb") as f:
            raw = f.read(MAX_CONFIG_BYTES + 1)
    except OSError as exc:
        raise ValueError(f"config file {path}: cannot read it ({exc.strerror or exc})") from None
    if len(raw) > MAX_CONFIG_BYTES:
        raise ValueError(f"config file {path} is larger than {MAX_CONFIG_BYTES // 2**20} MiB")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"config file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def _check_size(data: Any, path: str) -> None:
    """Count values, YAML aliases expanded, up to a bound: a few KB of nested
    aliases ("billion laughs") would otherwise expand when validated or sent."""
    from ludic_core.bounds import MAX_CONFIG_NODES

    stack, count = [data], 0
    while stack:
        node = stack.pop()
        count += 1
        if count > MAX_CONFIG_NODES:
            raise ValueError(f"{path}: config too large (more than {MAX_CONFIG_NODES:,} values, "
                             "YAML aliases expanded)")
        if isinstance(node, dict):
            stack.extend(node.values())
            count += len(node)
        elif isinstance(node, list):
            stack.extend(node)


def validated(cfg_cls: Any, data: dict, source: str) -> Any:
    """`cfg_cls.model_validate(data)`; invalid fields become one ValueError line
    naming `source` and each field's path (input values left out: they can be huge)."""
    from pydantic import ValidationError

    try:
        return cfg_cls.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False, include_input=False)
        fields = [f"{'.'.join(str(p) for p in e['loc']) or '(top level)'}: {e['msg']}" for e in errors[:10]]
        more = f"; and {len(errors) - 10} more" if len(errors) > 10 else ""
        raise ValueError(f"{source}: invalid {cfg_cls.__name__}: " + "; ".join(fields) + more) from None
