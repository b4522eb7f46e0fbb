"""Which vLLM server a run starts, and which adapter a served policy plays.

A LoRA run that publishes its adapter needs a server started with LoRA
serving at (at least) the adapter's rank; anything else publishes full
weights into a plain server. Decided here, from the run's configs, so the
flows and the stages agree on it. A policy served by vLLM (evaluation,
rejection sampling) may also name an adapter, or give an adapter directory
to load for the run: several adapters then compare on one server.
"""

from __future__ import annotations

import hashlib
import json
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Sequence

from ludic_core.config import AdapterPublishing, LoRAConfig
from ludic_core.vllm.server import VLLMServerConfig

__all__ = ["adapter_label", "adapter_rank", "served_adapter", "server_for_adapter", "server_for_run",
           "widest_adapter"]


def server_for_run(server: VLLMServerConfig, lora: LoRAConfig | None,
                   publishing: AdapterPublishing) -> VLLMServerConfig:
    """`server` with `max_lora_rank` set to the run's rank when the run publishes
    adapters and `server` states none; a stated rank below the run's is refused."""
    if not publishing.publishes_adapters(lora):
        return server
    assert lora is not None
    if server.max_lora_rank is None:
        return VLLMServerConfig.model_validate({**server.model_dump(), "max_lora_rank": lora.r})
    if server.max_lora_rank < lora.r:
        raise ValueError(f"the server's max_lora_rank ({server.max_lora_rank}) is below the run's LoRA rank "
                         f"(trainer.lora.r = {lora.r}): raise it, leave it unset (the run's rank is used), or "
                         "publish merged weights (lora.mode: merged)")
    return server


def adapter_label(path: str | Path) -> str:
    """The name an adapter directory is served under: its directory's name (a LoRA
    checkpoint's `model/` is named after its checkpoint, `step_00000010`) and a
    hash of its absolute path, so two runs' `step_00000010` never collide."""
    p = Path(path).resolve()
    stem = p.parent.name if p.name == "model" else p.name
    return f"{stem}-{hashlib.sha256(str(p).encode()).hexdigest()[:8]}"


def adapter_rank(path: str | Path) -> int:
    """The largest rank in an adapter directory's adapter_config.json (its `r`, or a `rank_pattern` value)."""
    cfg = json.loads((Path(path) / "adapter_config.json").read_text())
    return max([int(cfg["r"]), *map(int, (cfg.get("rank_pattern") or {}).values())])


def server_for_adapter(server: VLLMServerConfig, adapter: str | None) -> VLLMServerConfig:
    """`server` able to serve `adapter` (a directory: LoRA serving at its rank, unless stated)."""
    from ludic_core.lora.adapter_dir import is_adapter_dir  # torch: only when an adapter is served

    if adapter is None or server.max_lora_rank is not None:
        return server
    if not is_adapter_dir(adapter):
        raise FileNotFoundError(f"adapter {adapter!r} is not an adapter directory (adapter_config.json + "
                                "adapter_model.safetensors): a server the flow starts serves adapters given as "
                                "directories (a name only names one a running server already serves)")
    return VLLMServerConfig.model_validate({**server.model_dump(), "max_lora_rank": adapter_rank(adapter)})


def widest_adapter(adapters: Sequence[str]) -> str | None:
    """The adapter directory of the largest rank among `adapters` (names of served adapters
    are skipped): a server started for all of them is sized for this one. None if no directory."""
    from ludic_core.lora.adapter_dir import is_adapter_dir  # torch: only when adapters are served

    dirs = [a for a in adapters if is_adapter_dir(a)]
    return max(dirs, key=adapter_rank) if dirs else None


@contextmanager
def served_adapter(root_url: str, api_key: str | None, adapter: str | None) -> Iterator[str | None]:
    """The model name requests use for `adapter` while the block runs (None: the base).

    A name is used as given (the server says if it does not serve it). A
    directory is loaded under `adapter_label(dir)` and unloaded afterwards,
    unless the server already served it under that name (another run's use).
    Adapters are checked against the served base by the server's shapes
    only: an adapter of another base with the same shapes is not detected.
    """
    from ludic_core.lora.adapter_dir import is_adapter_dir
    from ludic_core.vllm.adapters import load_adapter, unload_adapter
    from ludic_core.vllm.http import ControlClient

    if adapter is None or not is_adapter_dir(adapter):
        yield adapter
        return
    name, control = adapter_label(adapter), ControlClient(root_url, api_key=api_key)
    try:
        already = name in [m["id"] for m in control.get("/v1/models").get("data", [])]
        if not already:
            load_adapter(control, name, Path(adapter).resolve(), serving="what it served")
        try:
            yield name
        finally:
            if not already:
                unload_adapter(control, name)
    finally:
        control.close()
