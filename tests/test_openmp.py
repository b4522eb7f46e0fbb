"""libgomp's wait policy: `openmp.configure()` sets it before torch loads, never over the
user's; importing `ludic_core` sets nothing; the entry points that decode (the CLI, a
worker's flow-run process) set it through `flows`.

Each case runs a fresh interpreter: libgomp reads its environment once, when torch
loads it, and prints what it read with OMP_DISPLAY_ENV (on stderr).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ludic_core import openmp

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="libgomp: torch's Linux wheels")

ROOT = Path(__file__).resolve().parents[1]
REPORT = "import os, torch\nfrom ludic_core import openmp\nprint(openmp.status(), os.environ.get('OMP_WAIT_POLICY'))"
CONFIGURE = "from ludic_core import openmp\nopenmp.configure()\n"


def _run(code: str, **env: str) -> tuple[str, str]:
    clean = {k: v for k, v in os.environ.items() if k not in openmp.SETTINGS}
    proc = subprocess.run([sys.executable, "-c", code], env={**clean, "OMP_DISPLAY_ENV": "verbose", **env},
                          capture_output=True, text=True, timeout=120, check=True, cwd=ROOT)
    return proc.stdout.strip(), proc.stderr


def test_configure_before_torch_sets_the_active_wait_policy_libgomp_reads():
    out, shown = _run(CONFIGURE + REPORT)
    assert out == "configured active"
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in shown
    assert f"GOMP_SPINCOUNT = '{openmp.SETTINGS['GOMP_SPINCOUNT']}'" in shown


def test_a_wait_policy_the_user_set_is_kept():
    out, shown = _run(CONFIGURE + REPORT, OMP_WAIT_POLICY="passive")
    assert out == "user passive"
    assert "OMP_WAIT_POLICY = 'PASSIVE'" in shown


def test_torch_imported_first_keeps_libgomps_defaults_and_says_so():
    out, shown = _run("import torch\n" + CONFIGURE + REPORT)
    assert out == "late None"
    assert "OMP_WAIT_POLICY = 'ACTIVE'" not in shown


def test_importing_ludic_core_sets_nothing():
    """A process that only imports the library (to validate a config, say) keeps libgomp's defaults."""
    out, shown = _run("import ludic_core\n" + REPORT)
    assert out == "late None"
    assert "OMP_WAIT_POLICY = 'ACTIVE'" not in shown


def test_the_cli_sets_it_before_torch():
    out, shown = _run("import flows.cli\n" + REPORT)
    assert out == "configured active"
    assert "OMP_WAIT_POLICY = 'ACTIVE'" in shown


@pytest.mark.slow  # 8 interpreters that load Prefect (and most, torch): ~12 s on 4 cores
def test_every_deployment_entrypoint_sets_it_before_torch_loads():
    """A worker's flow-run process loads a deployment's entrypoint (a file path) as Prefect's
    engine does; `flows` must be imported, and so the policy set, before anything loads torch."""
    deployments = yaml.safe_load((ROOT / "prefect.yaml").read_text())["deployments"]
    entrypoints = sorted({d["entrypoint"].split(":")[0]: d["entrypoint"] for d in deployments}.values())  # one a file
    code = (
        "import sys\n"
        "from prefect.flows import load_flow_from_entrypoint\n"
        "from ludic_core import openmp\n"
        "load_flow_from_entrypoint(sys.argv[1])\n"
        "print(openmp.status(), 'torch' in sys.modules)\n"
    )
    clean = {k: v for k, v in os.environ.items() if k not in openmp.SETTINGS}
    procs = {ep: subprocess.Popen([sys.executable, "-c", code, ep], env=clean, cwd=ROOT, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for ep in entrypoints}
    results = {ep: proc.communicate(timeout=300) for ep, proc in procs.items()}
    bad = {ep: (out.strip(), err[-500:]) for ep, (out, err) in results.items()
           if not out.strip().startswith("configured ")}
    assert len(entrypoints) >= 5 and not bad, bad
