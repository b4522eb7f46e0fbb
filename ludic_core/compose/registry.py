"""Moved to `ludic_core.registry` (below the algorithms, which resolve a custom credit and
loss through it); this old import path re-exports it."""

from ludic_core.registry import (BUNDLED, ComponentError, Kind, call_with_kwargs, check_kwargs, check_ref, registered,
                                 resolve)

__all__ = ["ComponentError", "Kind", "BUNDLED", "registered", "resolve", "check_kwargs", "call_with_kwargs",
           "check_ref"]
