"""The registry: names in configs -> the components they name, kind-checked, never called.

One registry resolves everything a config may name: envs, scripted policies,
tools, parsers, contexts (`ludic_core.compose` builds them) and the credit
assigners and losses of a `type: custom` algorithm (`ludic_core.algorithms`).
It sits below both, so the algorithms resolve a user's credit and loss the same
way the composition layer resolves a user's env.

- `names`:  a bundled name, an entry point or `pkg.module:Factory` -> the object;
- `kinds`:  what a component must declare before a config may call it;
- `errors`: `ComponentError`, the one error of both, naming the value.

Torch-free: a config checks a name's syntax (`check_ref`) wherever it loads.
"""

from ludic_core.registry.errors import ComponentError
from ludic_core.registry.kinds import check_kind
from ludic_core.registry.names import (BUNDLED, GROUPS, Kind, call_with_kwargs, check_kwargs, check_ref, registered,
                                       resolve)

__all__ = ["BUNDLED", "GROUPS", "ComponentError", "Kind", "call_with_kwargs", "check_kind", "check_kwargs",
           "check_ref", "registered", "resolve"]
