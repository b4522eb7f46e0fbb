"""Lazy package exports (PEP 562): a package names its public parts without loading them.

A package whose parts need torch (`losses`, `batching.collate`) still has parts a
torch-free config must reach (an algorithm config builds its loss through
`ludic_core.losses`, and `batching.saw` feeds rejection sampling). So its
`__init__` maps each exported name to the submodule that defines it, and the
submodule is imported on the first access of one of its names.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any, Callable, Mapping

__all__ = ["lazy_exports", "moved_module", "renamed_exports"]


def lazy_exports(package: str, sources: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`: `sources` maps an exported name to
    its submodule (relative to `package`); a name once loaded is kept in the package."""

    def __getattr__(name: str) -> Any:
        module = sources.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(sources))

    return __getattr__, __dir__


def renamed_exports(module: str, renames: Mapping[str, str]) -> Callable[[str], Any]:
    """`__getattr__` for `module` that keeps renamed names importable for one release:
    `renames` maps an old name to its new home, "pkg.module:NewName". Using an old name
    warns (a DeprecationWarning naming the new one) and returns the new object, so code
    written against the old name keeps running while it is told where to go."""

    def __getattr__(name: str) -> Any:
        target = renames.get(name)
        if target is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        home, new = target.split(":")
        warnings.warn(f"{module}.{name} is renamed {home}.{new}: import that instead ({name} goes in the "
                      "next release)", DeprecationWarning, stacklevel=2)
        return getattr(importlib.import_module(home), new)

    return __getattr__


def moved_module(old: str, new: str) -> None:
    """Called by the shim left at a moved module's old path: `import old` warns (a
    DeprecationWarning naming `new`) and binds the new module itself, so code written
    against the old path keeps running, and its objects are the new module's objects.

    The import is dynamic on purpose: a shim in a low layer must not add an import arrow up
    to the layer its module moved to (the import-linter contracts check the real arrows)."""
    warnings.warn(f"{old} moved to {new}: import that instead ({old} goes in the next release)",
                  DeprecationWarning, stacklevel=3)
    sys.modules[old] = importlib.import_module(new)  # the import system returns what sys.modules holds
