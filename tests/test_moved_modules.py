"""Modules moved by issue 56 item 7 keep their old path for one release: importing it warns
with the new path and gives the new module itself (ludic_core.lazy.moved_module)."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: old path -> new path, for every module item 7 moved
MOVED: dict[str, str] = {}


def test_a_shim_warns_with_the_new_path_and_is_the_new_module(tmp_path):
    pkg = tmp_path / "pk"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "new.py").write_text("X = object()\n")
    (pkg / "old.py").write_text("from ludic_core.lazy import moved_module\nmoved_module(__name__, 'pk.new')\n")
    code = textwrap.dedent("""
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            from pk.old import X
        import pk.new, pk.old
        assert X is pk.new.X and pk.old is pk.new, (pk.old, pk.new)
        (w,) = [w for w in caught if w.category is DeprecationWarning]
        print(w.message)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                         env={"PYTHONPATH": f"{tmp_path}:{Path(__file__).resolve().parents[1]}"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "pk.old moved to pk.new: import that instead (pk.old goes in the next release)"


@pytest.mark.parametrize("old,new", sorted(MOVED.items()))
def test_each_moved_module_keeps_its_old_path_for_a_release(old, new):
    sys.modules.pop(old, None)
    with pytest.warns(DeprecationWarning, match=f"{old} moved to {new}"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
