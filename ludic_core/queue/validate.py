"""Bounded, total checks of a stream entry before it becomes a `SAWItem`.

Every byte checked here was written by someone else, so each check bounds a
size before anything is allocated or parsed, JSON nesting is measured on the
raw bytes before `json.loads` recurses into it, and the only exception raised
is `MalformedItem`, whose message is the dead-letter reason a person reads:
it names the field and the offending value.

The bounds (a legitimate item is far inside each):
- header: at most `MAX_HEADER_BYTES` of UTF-8 JSON, `MAX_DEPTH` levels deep,
  integers of at most `MAX_INT_DIGITS` digits, no NaN/Infinity, no repeated key;
- weight: finite and |w| <= `MAX_ABS_WEIGHT` (1e6: credits are advantages or
  returns; 1e308 would overflow the loss in float32);
- arrays: exactly `input_ids`, `attention_mask`, `action_mask` (integer dtypes)
  and optionally `actor_logprobs` (a float dtype), all vectors of one length,
  at most `max_tokens` long (the trainer's `max_seq_len`), checked in the
  safetensors header before any array is read;
- values: masks in {0, 1}, token ids in [0, vocab_size), log-probs finite and
  in [`MIN_LOGPROB`, `LOGPROB_TOL`].
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping

import numpy as np

__all__ = ["MalformedItem", "load_json", "check_header", "check_tensor_header", "check_arrays", "short", "clip",
           "DEFAULT_MAX_TOKENS", "MAX_HEADER_BYTES", "MAX_ABS_WEIGHT"]

MAX_HEADER_BYTES = 64 * 1024
MAX_TENSOR_HEADER_BYTES = 16 * 1024
MAX_DEPTH = 16
MAX_INT_DIGITS = 20
MAX_ABS_WEIGHT = 1e6
MAX_TEXT_CHARS = 1024  # item ids, group ids, env names, tokenizer fingerprints
MAX_TEMPERATURE = 100.0
MIN_TEMPERATURE = 1e-5  # below it (and above 0) logits / T overflow float32
DEFAULT_MAX_TOKENS = 131_072  # when the trainer's max_seq_len is not given
ID_LIMIT = 2**31  # token ids when the trainer's vocabulary size is not given
LOGPROB_TOL = 1e-3  # float32 rounding of a log-prob near 0
MIN_LOGPROB = -1e4  # exp(new - old) of anything lower overflows the ratio

REQUIRED_ARRAYS = ("input_ids", "attention_mask", "action_mask")
OPTIONAL_ARRAYS = ("actor_logprobs",)
_INT_DTYPES = {"I8": 1, "U8": 1, "I16": 2, "U16": 2, "I32": 4, "U32": 4, "I64": 8, "U64": 8}
_FLOAT_DTYPES = {"F16": 2, "F32": 4, "F64": 8}
_HEADER_REQUIRED = ("format", "item_id", "env", "policy_version", "weight", "meta")
_HEADER_OPTIONAL = ("group_id", "tokenizer")
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*(?:"|\Z)', re.S)  # an unterminated string runs to the end


class MalformedItem(ValueError):
    """A stream entry that is not a SAW item this trainer can train on; the
    message is the reason written to the dead-letter stream."""


class _Refused(ValueError):
    """Raised by the json.loads hooks; the caller prefixes what was parsed."""


def short(value: Any, limit: int = 80) -> str:
    """`repr(value)` cut to `limit` characters: reasons quote hostile values."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def clip(text: str, limit: int = 200) -> str:
    """Plain text (an exception's message) cut to `limit` characters."""
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"


def nesting_depth(raw: bytes) -> int:
    """Deepest [ / { nesting outside strings, without recursion (numpy over the bytes)."""
    code = np.frombuffer(_STRING.sub(b'""', raw), dtype=np.uint8)
    step = ((code == ord("[")) | (code == ord("{"))).astype(np.int32)
    step -= ((code == ord("]")) | (code == ord("}"))).astype(np.int32)
    return int(np.cumsum(step).max(initial=0))


def load_json(raw: bytes, *, what: str, max_bytes: int) -> Any:
    """`raw` as JSON, refused (with the reason) when too long, not UTF-8, too
    deep, holding NaN/Infinity, a huge integer, a repeated key or a lone surrogate."""
    if len(raw) > max_bytes:
        raise MalformedItem(f"{what} is {len(raw)} bytes, more than the cap of {max_bytes}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedItem(f"{what} is not UTF-8 ({exc.reason}: byte 0x{raw[exc.start]:02x} at offset "
                            f"{exc.start})") from None
    if b"\x00" in raw:  # valid JSON never holds a raw NUL; UTF-16/32 text does
        raise MalformedItem(f"{what} holds a NUL byte at offset {raw.index(0)} (UTF-16 or UTF-32 text? "
                            "expected UTF-8 JSON)")
    depth = nesting_depth(raw)
    if depth > MAX_DEPTH:
        raise MalformedItem(f"{what} nests {depth} levels deep, more than {MAX_DEPTH}")
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_int=_bounded_int, parse_float=_finite_float,
                           object_pairs_hook=_unique_keys)
    except _Refused as exc:
        raise MalformedItem(f"{what} {exc}") from None
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, int-str limit
        raise MalformedItem(f"{what} is not JSON: {type(exc).__name__}: {clip(str(exc))}") from None
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise MalformedItem(f"{what} holds a lone UTF-16 surrogate {short(exc.object[exc.start:exc.end])} "
                            "in a string (not encodable as UTF-8)") from None
    return value


def _no_constant(name: str) -> Any:
    raise _Refused(f"holds {name}, which JSON does not allow")


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _Refused(f"holds an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"holds the number {short(text, 40)}, beyond float range")
    return value


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    seen: set[str] = set()
    for key, _ in pairs:
        if key in seen:
            raise _Refused(f"repeats the key {short(key)}")
        seen.add(key)
    return dict(pairs)


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _is_real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _field_error(key: str, value: Any, expected: str) -> MalformedItem:
    return MalformedItem(f"header field {key!r} is {short(value)}, expected {expected}")


def _check_text(key: str, value: Any, *, optional: bool = False) -> None:
    if optional and value is None:
        return
    if not isinstance(value, str) or not 0 < len(value) <= MAX_TEXT_CHARS:
        raise _field_error(key, value, f"a string of 1 to {MAX_TEXT_CHARS} characters"
                           + (" or null" if optional else ""))


def check_header(header: Any, fmt: str) -> dict[str, Any]:
    """The header's fields, each of its type and within its bound."""
    if not isinstance(header, dict):
        raise MalformedItem(f"header is a JSON {type(header).__name__}, not an object")
    if header.get("format") != fmt:
        raise MalformedItem(f"format {short(header.get('format'))} is not {fmt!r}")
    missing = [k for k in _HEADER_REQUIRED if k not in header]
    extra = sorted(set(header) - set(_HEADER_REQUIRED) - set(_HEADER_OPTIONAL))
    if missing or extra:
        raise MalformedItem(f"header misses fields {missing}" if missing else f"header has unexpected fields "
                            f"{short(extra)}")
    for key in ("item_id", "env"):
        _check_text(key, header[key])
    for key in _HEADER_OPTIONAL:
        _check_text(key, header.get(key), optional=True)
    version = header["policy_version"]
    if not _is_int(version) or not 0 <= version < 2**63:
        raise _field_error("policy_version", version, "an integer in [0, 2**63)")
    weight = header["weight"]
    if not _is_real(weight) or not abs(weight) <= MAX_ABS_WEIGHT:
        raise _field_error("weight", weight, f"a finite number within +-{MAX_ABS_WEIGHT:g}")
    _check_meta(header["meta"])
    return header


def _check_meta(meta: Any) -> None:
    """Meta travels into the trainer: `_`-keys are the trainer's own markers
    (`_pad`), and collation divides logits by `sampling_temperature`."""
    if not isinstance(meta, dict):
        raise _field_error("meta", meta, "an object")
    reserved = sorted(k for k in meta if k.startswith("_"))
    if reserved:
        raise MalformedItem(f"meta uses the trainer's reserved keys {short(reserved)}")
    temp = meta.get("sampling_temperature")
    if temp is not None and not (_is_real(temp) and (temp == 0 or MIN_TEMPERATURE <= temp <= MAX_TEMPERATURE)):
        raise MalformedItem(f"meta sampling_temperature is {short(temp)}, expected 0 (greedy) or a number in "
                            f"[{MIN_TEMPERATURE:g}, {MAX_TEMPERATURE:g}]")


def check_tensor_header(raw: bytes, *, max_tokens: int) -> int:
    """Read the safetensors header alone and check every array it declares
    (names, dtypes, rank, length <= `max_tokens`, byte sizes) and that the data
    that follows is exactly as long as declared; returns the token count."""
    if len(raw) < 8:
        raise MalformedItem(f"tensors are not safetensors: {len(raw)} bytes, too short for a header")
    size = int.from_bytes(raw[:8], "little")
    if size > MAX_TENSOR_HEADER_BYTES:
        raise MalformedItem(f"tensors are not safetensors: the first 8 bytes declare a {size}-byte header "
                            f"(cap {MAX_TENSOR_HEADER_BYTES})")
    if 8 + size > len(raw):
        raise MalformedItem(f"tensors are truncated: the safetensors header declares {size} bytes, "
                            f"{len(raw) - 8} follow")
    try:
        head = load_json(raw[8:8 + size], what="its header", max_bytes=MAX_TENSOR_HEADER_BYTES)
    except MalformedItem as exc:
        raise MalformedItem(f"tensors are not safetensors: {exc}") from None
    if not isinstance(head, dict):
        raise MalformedItem(f"tensors are not safetensors: the header is a JSON {type(head).__name__}")
    names = set(head) - {"__metadata__"}
    missing = [k for k in REQUIRED_ARRAYS if k not in names]
    extra = sorted(names - set(REQUIRED_ARRAYS) - set(OPTIONAL_ARRAYS))
    if missing or extra:
        raise MalformedItem(f"tensors miss {missing}" if missing else f"tensors hold unexpected arrays {short(extra)}")
    lengths, end = {}, 0
    for name in REQUIRED_ARRAYS + OPTIONAL_ARRAYS:
        if name in head:
            lengths[name], stop = _check_entry(name, head[name], max_tokens)
            end = max(end, stop)
    body = len(raw) - 8 - size
    if body < end:
        raise MalformedItem(f"tensors are truncated: the arrays need {end} bytes, {body} follow the header")
    if body > end:
        raise MalformedItem(f"tensors carry {body - end} bytes beyond their declared arrays")
    return _check_lengths(lengths)


def _check_entry(name: str, spec: Any, max_tokens: int) -> tuple[int, int]:
    """(length, end offset) of one declared array."""
    if not isinstance(spec, dict) or set(spec) != {"dtype", "shape", "data_offsets"}:
        raise MalformedItem(f"tensors entry {name} is {short(spec)}, not a safetensors array")
    dtype, shape, offsets = spec["dtype"], spec["shape"], spec["data_offsets"]
    sizes = _FLOAT_DTYPES if name == "actor_logprobs" else _INT_DTYPES
    if dtype not in sizes:
        kind = "a float" if name == "actor_logprobs" else "an integer"
        raise MalformedItem(f"{name} has dtype {short(dtype)}, expected {kind} type ({', '.join(sizes)})")
    if not isinstance(shape, list) or len(shape) != 1 or not _is_int(shape[0]) or shape[0] < 0:
        raise MalformedItem(f"{name} has shape {short(shape)}, expected a vector")
    if shape[0] > max_tokens:
        raise MalformedItem(f"{name} has {shape[0]} entries, more than the cap of {max_tokens} tokens "
                            "(the trainer's max_seq_len)")
    if not (isinstance(offsets, list) and len(offsets) == 2 and all(_is_int(o) for o in offsets)
            and 0 <= offsets[0] <= offsets[1]):
        raise MalformedItem(f"{name} has data_offsets {short(offsets)}, expected [begin, end]")
    need = shape[0] * sizes[dtype]
    if offsets[1] - offsets[0] != need:
        raise MalformedItem(f"{name} declares {offsets[1] - offsets[0]} bytes for {shape[0]} {dtype} values "
                            f"({need} needed)")
    return shape[0], offsets[1]


def _check_lengths(lengths: Mapping[str, int]) -> int:
    n = lengths["input_ids"]
    if lengths["attention_mask"] != n or lengths["action_mask"] != n:
        raise MalformedItem(f"masks must match input_ids length {n}: attention_mask {lengths['attention_mask']}, "
                            f"action_mask {lengths['action_mask']}")
    if lengths.get("actor_logprobs", n) != n:
        raise MalformedItem(f"actor_logprobs has {lengths['actor_logprobs']} entries for {n} tokens")
    if n == 0:
        raise MalformedItem("input_ids is empty")
    return n


def check_arrays(arrays: Mapping[str, np.ndarray], *, vocab_size: int | None) -> None:
    """Values: ids in the vocabulary, 0/1 masks, real log-probs; the reason
    names the first offending value and its position."""
    ids = arrays["input_ids"]
    limit = vocab_size if vocab_size is not None else ID_LIMIT
    bad = np.flatnonzero((ids < 0) | (ids >= limit))
    if bad.size:
        where = f"the trainer's vocabulary of {vocab_size}" if vocab_size is not None else "[0, 2**31)"
        raise MalformedItem(f"token id {int(ids[bad[0]])} is outside {where} (position {bad[0]}; an item from "
                            "another model?)")
    for name in ("attention_mask", "action_mask"):
        mask = arrays[name]
        bad = np.flatnonzero((mask != 0) & (mask != 1))
        if bad.size:
            raise MalformedItem(f"{name} holds {int(mask[bad[0]])} at position {bad[0]}, expected 0 or 1")
    hidden = np.flatnonzero((arrays["action_mask"] == 1) & (arrays["attention_mask"] == 0))
    if hidden.size:
        raise MalformedItem(f"action_mask marks token {hidden[0]}, which attention_mask hides")
    if "actor_logprobs" in arrays:
        _check_logprobs(arrays["actor_logprobs"].astype(np.float64))


def _check_logprobs(lps: np.ndarray) -> None:
    for bad, why in ((~np.isfinite(lps), "not finite"), (lps > LOGPROB_TOL, "above 0: a log-probability is <= 0"),
                     (lps < MIN_LOGPROB, f"below {MIN_LOGPROB:g}")):
        idx = np.flatnonzero(bad)
        if idx.size:
            raise MalformedItem(f"actor_logprobs holds {float(lps[idx[0]])} at position {idx[0]} ({why})")
