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
#: the environment variable through which the launcher sets the worker's spin window
#: (`ludic_vllm_ext.shorten_idle_spin`, which reads it on import under the same name)
SPIN_ENV = "LUDIC_VLLM_SPIN_S"

__all__ = ["PLUGIN_DIR", "EXTENSION_CLS", "SPIN_ENV"]
