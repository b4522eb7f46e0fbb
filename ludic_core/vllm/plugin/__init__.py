"""Code that runs INSIDE a vLLM server, in vLLM's own virtual environment.

The launcher puts this directory on the server's PYTHONPATH, so its modules are
imported there as top-level modules (`ludic_vllm_ext`, `ludic_gloo_wire`)
without ludic or its dependencies installed. They import only torch, the
standard library and (the extension) vLLM. ludic's trainer imports the wire
module from here as `ludic_core.vllm.plugin.ludic_gloo_wire`.
"""

from pathlib import Path

PLUGIN_DIR = Path(__file__).resolve().parent
EXTENSION_CLS = "ludic_vllm_ext.LudicWorkerExtension"

__all__ = ["PLUGIN_DIR", "EXTENSION_CLS"]
