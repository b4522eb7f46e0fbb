"""SAW items on the wire: a JSON header plus the token arrays as safetensors.

No pickle: a stream entry is two byte strings that any language can read, and
decoding is total: any bytes give a `Stamped` item or a `MalformedItem` whose
message names the problem (the bounds and checks: `queue.validate`). The header
carries the stamps the trainer decides on (item id, group, env, policy version,
tokenizer fingerprint) so it never has to open the arrays of an item it drops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from ludic_core.batching.saw import SAWItem
from ludic_core.queue.validate import (DEFAULT_MAX_TOKENS, MAX_HEADER_BYTES, MalformedItem, check_arrays,
                                       check_header, check_tensor_header, clip, load_json, short)

__all__ = ["FORMAT", "MalformedItem", "Stamped", "encode_item", "decode_header", "decode_item"]

FORMAT = "ludic.saw/1"
_ENCODE_AS = {"input_ids": np.int64, "attention_mask": np.int8, "action_mask": np.int8}


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
    arrays = {k: np.asarray(getattr(item, k), dtype=t) for k, t in _ENCODE_AS.items()}
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


def decode_header(fields: Mapping[Any, bytes]) -> dict[str, Any]:
    """The header alone (cheap: no arrays), every field checked; never raises
    anything but `MalformedItem`."""
    try:
        raw = _field(fields, "header")
        return check_header(load_json(raw, what="header", max_bytes=MAX_HEADER_BYTES), FORMAT)
    except MalformedItem:
        raise
    except Exception as exc:  # a gap in the checks must not become a poison loop
        raise MalformedItem(f"unexpected {type(exc).__name__} while decoding the header: {clip(str(exc))}") from None


def decode_item(fields: Mapping[Any, bytes], *, vocab_size: int | None = None,
                max_tokens: int | None = None) -> Stamped:
    """Header and arrays back into a `SAWItem`, or `MalformedItem` naming the
    problem, whatever the bytes (token ids beyond `vocab_size` mean an item from
    another model; more than `max_tokens` tokens, default `DEFAULT_MAX_TOKENS`,
    are refused before any array is read)."""
    try:
        return _decode(fields, vocab_size, DEFAULT_MAX_TOKENS if max_tokens is None else max_tokens)
    except MalformedItem:
        raise
    except Exception as exc:
        raise MalformedItem(f"unexpected {type(exc).__name__} while decoding: {clip(str(exc))}") from None


def _decode(fields: Mapping[bytes | str, bytes], vocab_size: int | None, max_tokens: int) -> Stamped:
    header = decode_header(fields)
    raw = _field(fields, "tensors")
    check_tensor_header(raw, max_tokens=max_tokens)
    try:
        arrays = st_load(raw)
    except Exception as exc:  # safetensors raises its own error types on garbage
        raise MalformedItem(f"tensors are not safetensors: {clip(str(exc))}") from None
    check_arrays(arrays, vocab_size=vocab_size)
    lps = arrays.get("actor_logprobs")
    meta = {**header["meta"], "policy_version": header["policy_version"], "item_id": header["item_id"]}
    item = SAWItem(input_ids=arrays["input_ids"].tolist(), attention_mask=arrays["attention_mask"].tolist(),
                   action_mask=arrays["action_mask"].tolist(), weight=float(header["weight"]), meta=meta,
                   actor_logprobs=None if lps is None else lps.astype(np.float64).tolist())
    return Stamped(item=item, item_id=header["item_id"], group_id=header.get("group_id"), env=header["env"],
                   policy_version=header["policy_version"], tokenizer=header.get("tokenizer"), header=header)


def _field(fields: Mapping[bytes | str, bytes], name: str) -> bytes:
    value = fields.get(name.encode(), fields.get(name))
    if value is None:
        names = sorted(_name(k) for k in fields)
        listed = ", ".join(names[:10]) + (f", ... ({len(names)} in all)" if len(names) > 10 else "")
        raise MalformedItem(f"entry has no {name!r} field (fields: [{listed}])")
    return value if isinstance(value, bytes) else str(value).encode()


def _name(key: bytes | str) -> str:
    """A field name as a reason quotes it: text if it is UTF-8, else its bytes."""
    if isinstance(key, bytes):
        try:
            key = key.decode()
        except UnicodeDecodeError:
            pass
    return short(key, 40)


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)
