"""ludic_core sets libgomp's wait policy before torch loads it, and never over the user's.

Each case runs a fresh interpreter: libgomp reads its environment once, when torch
loads it, and prints what it read with OMP_DISPLAY_ENV (on stderr).
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ludic_core import openmp

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libgomp: torch's Linux wheels")

REPORT = "import os, torch, ludic_core; print(ludic_core.openmp.status(), os.environ.get('OMP_WAIT_POLICY'))"


def _run(code: str, **env: str) -> tuple[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in openmp.SETTINGS}
    proc = subprocess.run([sys.executable, "-c", code], env={**clean, "OMP_DISPLAY_ENV": "verbose", **env},
                          capture_output=True, text=True, timeout=120, check=True)
    return proc.stdout.strip(), proc.stderr


def test_importing_ludic_core_first_sets_the_active_wait_policy_libgomp_reads():
    out, shown = _run("import ludic_core\n" + REPORT)
    assert out == "configured active"
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in shown
    assert f"GOMP_SPINCOUNT = '{openmp.SETTINGS['GOMP_SPINCOUNT']}'" in shown


def test_a_wait_policy_the_user_set_is_kept():
    out, shown = _run("import ludic_core\n" + REPORT, OMP_WAIT_POLICY="passive")
    assert out == "user passive"
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in shown


def test_torch_imported_first_keeps_libgomps_defaults_and_says_so():
    out, shown = _run("import torch\n" + REPORT)
    assert out == "late None"
    assert "OMP_WAIT_POLICY = 'ACTIVE'" not in shown
