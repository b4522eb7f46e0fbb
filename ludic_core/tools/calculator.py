"""`calculator`: exact arithmetic for a policy, without `eval`.

The expression comes from a model being trained, so it is hostile by default: it is parsed
with `ast` and only numbers, `+ - * / // % **`, unary signs and parentheses are evaluated.
Everything a policy could use to stall or crash the rollout is bounded before it is computed:
the expression's length (which also bounds nesting), the size of a power (`9**9**9` is refused
from an estimate of its digits, never computed), and the size of every intermediate result.
A refused or failed expression raises ValueError with a message the policy reads as its
observation (`run_tool` turns it into `Error: ...`).
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Callable, Union

__all__ = ["calculator", "MAX_EXPRESSION_CHARS", "MAX_DIGITS"]

MAX_EXPRESSION_CHARS = 200
MAX_DIGITS = 100  # integers up to 10**100; floats up to the same magnitude
_MAX_MAGNITUDE = 10**MAX_DIGITS
_ALLOWED = "use only numbers, + - * / // % ** and parentheses"

Number = Union[int, float]

_BINARY: dict[type[ast.operator], Callable[[Number, Number], Number]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type[ast.unaryop], Callable[[Number], Number]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_SYMBOL = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**"}

# what a refused node is called in the message (the rest: its class name)
_NODE_NAMES: dict[type[ast.AST], str] = {
    ast.Name: "names", ast.Attribute: "attribute access", ast.Call: "function calls", ast.Lambda: "lambdas",
    ast.Subscript: "indexing", ast.Compare: "comparisons", ast.BoolOp: "and / or", ast.IfExp: "conditionals",
    ast.ListComp: "comprehensions", ast.SetComp: "comprehensions", ast.DictComp: "comprehensions",
    ast.GeneratorExp: "comprehensions", ast.List: "lists", ast.Tuple: "tuples", ast.Dict: "dicts",
    ast.Set: "sets", ast.JoinedStr: "strings", ast.NamedExpr: "assignments",
}


def calculator(expression: str) -> str:
    """Evaluate arithmetic: numbers, + - * / // % ** and parentheses.

    No names or functions. Integer results are exact; others are given to 12 significant digits.

    Args:
        expression: the arithmetic expression, e.g. "(17 + 3) * 2 ** 5 / 7" (at most 200 characters)
    """
    if not isinstance(expression, str):
        raise ValueError(f"expression must be a string, got {type(expression).__name__}")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ValueError(f"expression is {len(expression):,} characters long; at most {MAX_EXPRESSION_CHARS} "
                         "are allowed")
    if not expression.strip():
        raise ValueError(f"expression is empty; {_ALLOWED}")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ValueError(f"not a valid expression ({exc.msg}); {_ALLOWED}") from None
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes; nesting past the parser's limits
        raise ValueError(f"not a valid expression ({type(exc).__name__}); {_ALLOWED}") from None
    try:
        return _format(_eval(tree.body))
    except RecursionError:  # cannot happen within the length limit; never let it out of the tool
        raise ValueError("expression is nested too deeply") from None


def _eval(node: ast.expr) -> Number:
    if isinstance(node, ast.Constant):
        value = node.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{value!r} is not a number; {_ALLOWED}")
        return _checked(value)
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _checked(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Pow):
            _check_power(left, right)
        try:
            result = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ValueError(f"division by zero in {_show(left)} {_SYMBOL[type(node.op)]} {_show(right)}") from None
        except OverflowError:
            raise ValueError(f"result too large: more than {MAX_DIGITS} digits") from None
        return _checked(result)
    what = _NODE_NAMES.get(type(node)) or (
        f"the operator {type(node.op).__name__}" if isinstance(node, (ast.BinOp, ast.UnaryOp)) else type(node).__name__)
    raise ValueError(f"{what} not allowed; {_ALLOWED}")


def _check_power(base: Number, exponent: Number) -> None:
    """Refuse a power whose result would pass MAX_DIGITS, from its estimated size, before computing it."""
    if abs(base) <= 1 or exponent <= 0:
        return  # bounded by 1 in magnitude, or a fraction (a negative exponent makes a float)
    if exponent * math.log10(abs(base)) > MAX_DIGITS:
        raise ValueError(f"result too large: {_show(base)} ** {_show(exponent)} has more than {MAX_DIGITS} digits")


def _checked(value: object) -> Number:
    """The value, if it is a real number within the magnitude limit."""
    if isinstance(value, complex):
        raise ValueError("the result is not a real number (a fractional power of a negative number)")
    if not isinstance(value, (int, float)):
        raise ValueError(f"unexpected result {type(value).__name__}")
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("the result is not a finite number")
    if abs(value) >= _MAX_MAGNITUDE:
        raise ValueError(f"result too large: more than {MAX_DIGITS} digits")
    return value


def _format(value: Number) -> str:
    """Integers (and floats with an integral value below 10**15) as integers, other floats to 12 digits."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".12g")


def _show(value: Number) -> str:
    text = _format(value)
    return text if len(text) <= 24 else text[:10] + "..." + text[-10:]
