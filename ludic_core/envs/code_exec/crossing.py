"""Calls from the judge to the candidate, as data (standard library only).

The judge (the problem's tests) and the candidate (the model's code) run as
two processes. `check(candidate)` gets a `proxy`: each call sends the
arguments down a pipe, the candidate's `serve` loop calls the real function
and sends the result back, and the judge compares what it decoded. Only plain
data crosses: None, bool, int, float, complex, str, bytes, list, tuple, dict,
set, frozenset, each rebuilt by the judge from its own types, so no `__eq__`,
`__hash__` or `__repr__` the candidate wrote ever runs in the judge. A value
of any other type is the candidate's error (a TypeError in that test), as is
an exception the function raised (rebuilt as the builtin exception of that
name when there is one).

One message is one JSON line. Every JSON object is a tag, so a dict can never
pass for a tagged value: {"t": [..]} tuple, {"d": [[k, v], ..]} dict,
{"s": [..]} set, {"fs": [..]} frozenset, {"b": "hex"} bytes, {"c": [re, im]}
complex, {"f": "nan" | "inf" | "-inf"} float. The judge bounds a reply's size
and depth before it builds anything.

This file's source is appended to both programs; `serve` and `proxy` are the
only names they use.
"""

import json as _json
import os as _os

__all__ = ["encode", "decode", "serve", "proxy", "CrossingError", "MAX_REPLY_BYTES", "MAX_DEPTH"]

MAX_REPLY_BYTES = 16 * 1024 * 1024
MAX_DEPTH = 100
_TAGS = ("f", "b", "t", "s", "fs", "c", "d")
_FLOATS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}


class CrossingError(Exception):
    """A reply the judge cannot read: the test that made the call fails with it."""


def encode(value, depth=0):
    """`value` as JSON-able tagged data; TypeError for anything that is not plain data."""
    if depth > MAX_DEPTH:
        raise TypeError("the value is nested too deeply to cross as data")
    kind = type(value)
    if value is None or kind is bool or kind is int or kind is str:
        return value
    if kind is float:
        return value if value == value and value not in (float("inf"), float("-inf")) else {"f": repr(value)}
    if kind is list:
        return [encode(v, depth + 1) for v in value]
    tags = {tuple: "t", set: "s", frozenset: "fs"}
    if kind in tags:
        return {tags[kind]: [encode(v, depth + 1) for v in value]}
    if kind is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is bytes:
        return {"b": value.hex()}
    if kind is complex:
        return {"c": [encode(value.real, depth + 1), encode(value.imag, depth + 1)]}
    raise TypeError(f"a value of type {kind.__name__} cannot cross to the judge as data")


def decode(obj, depth=0):
    """The value `encode` made; CrossingError for anything else."""
    if depth > MAX_DEPTH:
        raise CrossingError("the reply is nested too deeply")
    if obj is None or type(obj) in (bool, int, float, str):
        return obj
    if type(obj) is list:
        return [decode(v, depth + 1) for v in obj]
    if type(obj) is not dict or len(obj) != 1:
        raise CrossingError("the reply is not a value the judge can read")
    (tag, body), = obj.items()
    if tag not in _TAGS:
        raise CrossingError(f"the reply has an unknown tag {str(tag)[:20]!r}")
    try:
        if tag == "f" and body in _FLOATS:
            return _FLOATS[body]
        if tag == "b" and type(body) is str:
            return bytes.fromhex(body)
        items = [decode(v, depth + 1) for v in _as_list(body)]
        if tag == "t":
            return tuple(items)
        if tag == "s":
            return set(items)
        if tag == "fs":
            return frozenset(items)
        if tag == "c" and len(items) == 2:
            return complex(*items)
        if tag == "d" and all(type(p) is list and len(p) == 2 for p in items):
            return {k: v for k, v in items}
    except (TypeError, ValueError) as exc:  # an unhashable key, bad hex, a complex of strings
        raise CrossingError(f"the reply is not a value the judge can read ({exc})") from None
    raise CrossingError("the reply is not a value the judge can read")


def _as_list(body):
    if type(body) is not list:
        raise CrossingError("the reply is not a value the judge can read")
    return body


def _read_line(fd, limit):
    chunks, size = [], 0
    while True:
        chunk = _os.read(fd, 65536)
        if not chunk:
            return None
        end = chunk.find(b"\n")
        if end >= 0:
            chunks.append(chunk[:end])
            return b"".join(chunks)  # a request waits for its reply, so nothing follows the newline
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            raise CrossingError(f"the reply is larger than {limit} bytes")


def _write_line(fd, data):
    view = memoryview(data + b"\n")
    while view:
        view = view[_os.write(fd, view):]


def serve(fn, rfd=3, wfd=4):
    """The candidate's side: answer each call with fn's result or its exception, until the judge hangs up."""
    while True:
        line = _read_line(rfd, 1 << 30)
        if line is None:
            return
        try:
            call = _json.loads(line)
            result = fn(*decode(call["args"]), **dict(decode(call["kwargs"])))
            reply = {"value": encode(result)}
        except BaseException as exc:  # noqa: BLE001 - the judge decides what an exception means
            reply = {"raised": [type(exc).__name__, str(exc)[:500]]}
        _flush_output()  # the candidate is killed once the judge is done: what it printed must be out first
        _write_line(wfd, _json.dumps(reply).encode())


def _flush_output():
    import sys

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 - a candidate may have closed or replaced its streams
            pass


def proxy(wfd=3, rfd=4, limit=MAX_REPLY_BYTES):
    """The judge's side: a function that calls the candidate's through the pipes."""
    import builtins

    def candidate(*args, **kwargs):
        try:
            _write_line(wfd, _json.dumps({"args": encode(list(args)), "kwargs": encode(kwargs)}).encode())
        except BrokenPipeError:
            raise CrossingError("the candidate's process has ended") from None
        line = _read_line(rfd, limit)
        if line is None:
            raise CrossingError("the candidate's process ended during the call")
        try:
            reply = _json.loads(line)
        except (ValueError, RecursionError):
            raise CrossingError("the reply is not JSON") from None
        if type(reply) is dict and "value" in reply:
            return decode(reply["value"])
        raised = reply.get("raised") if type(reply) is dict else None
        if not (type(raised) is list and len(raised) == 2 and all(type(x) is str for x in raised)):
            raise CrossingError("the reply is neither a value nor an exception")
        cls = getattr(builtins, raised[0], None)
        if not (isinstance(cls, type) and issubclass(cls, Exception)):
            cls = CrossingError
        raise cls(raised[1][:500])

    return candidate
