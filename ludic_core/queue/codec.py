"""SAW items on the wire: a JSON header plus the token arrays as safetensors.

No pickle: a stream entry is two byte strings that any language can read, and
decoding a hostile entry can raise `MalformedItem` and nothing worse. The header
carries the stamps the trainer decides on (item id, group, env, policy version,
tokenizer fingerprint) so it never has to open the arrays of an item it drops.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from ludic_core.batching.saw import SAWItem

__all__ = ["FORMAT", "MalformedItem", "Stamped", "encode_item", "decode_header", "decode_item"]

FORMAT = "ludic.saw/1"
_ARRAYS = {"input_ids": np.int64, "attention_mask": np.int8, "action_mask": np.int8}


class MalformedItem(ValueError):
    """A stream entry that is not a SAW item this trainer can train on; the
    message is the reason written to the dead-letter stream."""


@dataclass(frozen=True)
class Stamped:
    """A decoded entry: the item and the stamps it travelled with."""

    item: SAWItem
    item_id: str
    group_id: str | None
    env: str
    policy_version: int
    tokenizer: str | None = None
    header: dict[str, Any] = field(default_factory=dict)


def encode_item(item: SAWItem, *, item_id: str, env: str, policy_version: int,
                tokenizer: str | None = None) -> dict[str, bytes]:
    """Stream-entry fields (`header`, `tensors`) of one item."""
    arrays = {k: np.asarray(getattr(item, k), dtype=t) for k, t in _ARRAYS.items()}
    if item.actor_logprobs is not None:
        arrays["actor_logprobs"] = np.asarray(item.actor_logprobs, dtype=np.float32)
    meta = {k: v for k, v in item.meta.items() if k != "policy_version"}
    header = {"format": FORMAT, "item_id": item_id, "group_id": _str_or_none(item.meta.get("group_id")),
              "env": env, "policy_version": int(policy_version), "tokenizer": tokenizer,
              "weight": float(item.weight), "meta": meta}
    try:
        head = json.dumps(header, allow_nan=False).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"item {item_id}: header is not plain JSON ({exc}); meta={meta!r}") from exc
    return {"header": head, "tensors": st_save(arrays)}


def decode_header(fields: Mapping[bytes | str, bytes]) -> dict[str, Any]:
    """The header alone (cheap: no arrays), checked for the fields every consumer reads."""
    raw = _field(fields, "header")
    try:
        header = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise MalformedItem(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise MalformedItem(f"header is a JSON {type(header).__name__}, not an object")
    if header.get("format") != FORMAT:
        raise MalformedItem(f"format {header.get('format')!r} is not {FORMAT!r}")
    for key, kind in (("item_id", str), ("env", str), ("policy_version", int), ("weight", (int, float)),
                      ("meta", dict)):
        if not isinstance(header.get(key), kind) or isinstance(header.get(key), bool):
            raise MalformedItem(f"header field {key!r} is {header.get(key)!r}")
    if not math.isfinite(header["weight"]):
        raise MalformedItem(f"weight {header['weight']!r} is not finite")
    return header


def decode_item(fields: Mapping[bytes | str, bytes], *, vocab_size: int | None = None) -> Stamped:
    """Header and arrays back into a `SAWItem`; `MalformedItem` naming the problem
    (token ids beyond `vocab_size` mean an item from another model)."""
    header = decode_header(fields)
    try:
        arrays = st_load(_field(fields, "tensors"))
    except MalformedItem:
        raise
    except Exception as exc:  # safetensors raises its own error types on garbage
        raise MalformedItem(f"tensors are not safetensors: {exc}") from None
    missing = [k for k in _ARRAYS if k not in arrays]
    if missing:
        raise MalformedItem(f"tensors miss {missing}")
    ids = arrays["input_ids"]
    if ids.ndim != 1 or ids.size == 0:
        raise MalformedItem(f"input_ids has shape {list(ids.shape)}, expected a non-empty vector")
    if vocab_size is not None and (int(ids.max()) >= vocab_size or int(ids.min()) < 0):
        raise MalformedItem(f"token id {int(ids.max())} is outside the trainer's vocabulary of {vocab_size} "
                            "(an item from another model?)")
    lps = arrays.get("actor_logprobs")
    meta = {**header["meta"], "policy_version": header["policy_version"], "item_id": header["item_id"]}
    try:
        item = SAWItem(input_ids=ids.tolist(), attention_mask=arrays["attention_mask"].tolist(),
                       action_mask=arrays["action_mask"].tolist(), weight=float(header["weight"]), meta=meta,
                       actor_logprobs=None if lps is None else lps.astype(np.float64).tolist())
    except ValueError as exc:
        raise MalformedItem(str(exc)) from None
    return Stamped(item=item, item_id=header["item_id"], group_id=header.get("group_id"), env=header["env"],
                   policy_version=header["policy_version"], tokenizer=header.get("tokenizer"), header=header)


def _field(fields: Mapping[bytes | str, bytes], name: str) -> bytes:
    value = fields.get(name.encode(), fields.get(name))  # type: ignore[call-overload]
    if value is None:
        raise MalformedItem(f"entry has no {name!r} field (fields: {sorted(_text(k) for k in fields)})")
    return value if isinstance(value, bytes) else str(value).encode()


def _text(key: bytes | str) -> str:
    return key.decode(errors="replace") if isinstance(key, bytes) else key


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
