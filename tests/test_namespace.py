"""The top-level namespace: `from ludic_core import ...` names a first program's parts, lazily,
and importing `ludic_core` changes nothing in the process (issue 56 item 8)."""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

import ludic_core
from tests.doc_snippets import README, python_blocks_in

ROOT = Path(__file__).resolve().parents[1]


def test_importing_ludic_core_changes_no_environment_and_loads_no_torch():
    code = (
        "import json, os, sys\n"
        "before = dict(os.environ)\n"
        "import ludic_core\n"
        "print(json.dumps({'changed': sorted(k for k in set(before) | set(os.environ)\n"
        "                                    if before.get(k) != os.environ.get(k)),\n"
        "                  'torch': 'torch' in sys.modules}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert json.loads(out) == {"changed": [], "torch": False}


@pytest.mark.parametrize("name", ludic_core.__all__)
def test_each_curated_name_is_its_packages_own_export(name):
    package = importlib.import_module(f"ludic_core.{ludic_core._SOURCE[name]}")
    assert name in package.__all__
    assert getattr(ludic_core, name) is getattr(package, name)
    assert name in dir(ludic_core)


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="no attribute 'Trainers'"):
        ludic_core.Trainers  # noqa: B018


def test_the_readme_quickstart_needs_at_most_three_import_statements():
    (snippet,) = python_blocks_in(README)
    imports = [n for n in ast.walk(ast.parse(snippet)) if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert len(imports) <= 3, [ast.unparse(n) for n in imports]  # was 9, one per package
    assert [n.module for n in imports if isinstance(n, ast.ImportFrom)] == ["ludic_core"]
