"""The data wire between judge and candidate: plain values round-trip with
their exact types; anything else is refused, on both sides, with a reason."""

from __future__ import annotations

import json
import math

import pytest

from ludic_core.envs.code_exec.crossing import MAX_DEPTH, CrossingError, decode, encode
from ludic_core.envs.code_exec.seccomp import ARCHES, filter_program


@pytest.mark.parametrize("value", [None, True, 0, -7, 2 ** 200, 1.5, -0.0, "é\n", b"\x00\xff", [1, [2]], (1, (2,)),
                                   {"a": (1, 2), 3: None, (4, 5): [6]}, {1, 2}, frozenset({"x"}), 1 + 2j, (), [],
                                   {"d": 1}, [{"t": [1]}]])
def test_plain_values_round_trip_with_their_types(value):
    back = decode(json.loads(json.dumps(encode(value))))
    assert back == value and type(back) is type(value)


def test_non_finite_floats_cross_as_tags():
    assert encode(float("inf")) == {"f": "inf"}
    assert math.isnan(decode(json.loads(json.dumps(encode(float("nan"))))))


class _Eq:
    def __eq__(self, other):
        return True


class _Str(str):
    pass


@pytest.mark.parametrize("value", [_Eq(), _Str("x"), [_Eq()], {1: _Eq()}, object(), print, range(3)])
def test_anything_but_plain_data_is_refused(value):
    with pytest.raises(TypeError, match="cannot cross"):
        encode(value)


@pytest.mark.parametrize("obj, reason", [({"zz": 1}, "unknown tag"), ({"t": 1}, "not a value"), ({}, "not a value"),
                                         ({"d": [[[1], 2]]}, "unhashable"), ({"b": "zz"}, "non-hexadecimal"),
                                         ({"a": 1, "b": 2}, "not a value"), ({"f": "1e999"}, "not a value"), ({"c": [1]}, "not a value")])
def test_replies_that_are_not_values_are_crossing_errors(obj, reason):
    with pytest.raises(CrossingError, match=reason):
        decode(obj)


def test_nesting_is_bounded_on_both_sides():
    deep: list = []
    for _ in range(MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(TypeError, match="too deeply"):
        encode(deep)
    with pytest.raises(CrossingError, match="too deeply"):
        decode(deep)


@pytest.mark.parametrize("machine", list(ARCHES))
def test_the_seccomp_filter_is_whole_instructions_with_jumps_in_range(machine):
    """The jumps land inside the program (an out-of-range jump is rejected by the kernel at install)."""
    import struct

    prog = filter_program(machine)
    assert len(prog) % 8 == 0
    code = [struct.unpack("=HBBI", prog[i:i + 8]) for i in range(0, len(prog), 8)]
    for i, (op, jt, jf, _) in enumerate(code):
        if op in (0x15, 0x35, 0x45):
            assert i + 1 + max(jt, jf) < len(code)
    assert code[-1][0] == 0x06 and code[-1][3] == 0x80000000  # ends in a kill, for a foreign ABI
