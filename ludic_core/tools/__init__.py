"""Bundled tools for tool-using agents (`ToolAgent`), named in configs as `calculator` and `python`.

Each tool is a plain typed function whose docstring is its schema (`function_schema`). A policy
being trained sends them anything, so each one bounds what it does and answers a bad call with an
error message (raised, and turned into an `Error: ...` observation by `run_tool`), never a hang.

Imports stay light: the sandbox pool behind `python` starts on its first call, not here.
"""

from ludic_core.tools.calculator import calculator
from ludic_core.tools.python_tool import configure_python_tool, python

__all__ = ["calculator", "python", "configure_python_tool"]
