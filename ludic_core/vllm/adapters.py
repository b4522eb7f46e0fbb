"""Versioned LoRA adapters in a running vLLM server, through its runtime LoRA routes.

A LoRA run publishes megabytes of adapter per step instead of the whole
model: the adapter of version N is written as PEFT files to
`adapter_dir/policy-vN/` (renamed into place once complete), the server loads
it from there (POST /v1/load_lora_adapter; the server must run with
`--enable-lora` and VLLM_ALLOW_RUNTIME_LORA_UPDATING, see `VLLMServerConfig`),
and requests name it. The base weights never change, so a completion on
`policy-vN` came from version N, whatever was loaded meanwhile.

Only the newest `keep_last` stay loaded: after a load, older ones are
unloaded (oldest first). vLLM's unload only stops new requests from naming
an adapter; one still running keeps it, and vLLM re-reads it from its path
if its cache dropped it meanwhile, so the files are deleted one publish
after the unload, not at once. A republished version (a resumed run redoes
a step, with possibly other weights) is loaded in place from a NEW path:
vLLM keys its prefix cache by adapter name and path, so the old path would
reuse KV blocks computed with the old weights.
The server, not this object, is the record of what is loaded: a publisher
that starts against a server that already serves adapters (a retried stage,
a restarted trainer) takes them over, oldest version first.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Mapping

from ludic_core.inference.errors import InferenceServerError
from ludic_core.lora.names import adapter_name, adapter_version
from ludic_core.vllm.http import ControlClient

__all__ = ["AdapterLoadError", "PUBLISHED_LOG", "PublishedAdapter", "ServerAdapters", "adapter_problems",
           "load_adapter", "read_published", "to_unload", "unload_adapter"]

#: One JSON line per adapter published into adapter_dir (what a run's artifacts list).
PUBLISHED_LOG = "published.jsonl"

log = logging.getLogger(__name__)
#: the directory names `_write` gives: `policy-vN`, `policy-vN.K` for a republished version
_OWN_NAME = re.compile(r"policy-v\d{1,19}(\.\d{1,9})?")


class AdapterLoadError(ValueError):
    """The server refused an adapter; it keeps serving what it served before."""


@dataclass(frozen=True)
class PublishedAdapter:
    """One adapter this publisher put on the server: what a run's artifacts list."""

    name: str
    version: int
    path: str
    bytes: int
    seconds: float


def read_published(adapter_dir: str | Path) -> list[dict[str, Any]]:
    """Every adapter published into `adapter_dir`, in publish order ([] before the first)."""
    from ludic_core.jsonl import iter_jsonl

    log_path = Path(adapter_dir) / PUBLISHED_LOG
    return [row for _, row in iter_jsonl(log_path)] if log_path.is_file() else []


def to_unload(loaded: list[str], keep_last: int) -> list[str]:
    """The adapters to unload so that the newest `keep_last` stay: the oldest
    first (`loaded` is in load order, oldest first)."""
    if keep_last < 1:
        raise ValueError(f"keep_last must be >= 1, got {keep_last}")
    return loaded[: max(len(loaded) - keep_last, 0)]


def adapter_problems(tensors: Mapping[str, Any], config: Any,
                     schema: Mapping[str, tuple[str, tuple[int, ...]]]) -> list[str]:
    """Why vLLM would serve these adapter tensors wrongly; [] when they fit.

    vLLM pads an adapter into slots of `--max-lora-rank`, so a lora_A with too
    few rows loads without complaint and is served with the wrong scaling:
    check each pair against its config's rank and its base weight's shape
    (`schema`: the served checkpoint's name -> (dtype, shape)) before sending.
    """
    problems = []
    if not tensors:
        return ["no adapter tensors"]
    for key, t in tensors.items():
        match = re.fullmatch(r"base_model\.model\.(.+)\.lora_([AB])\.weight", key)
        if match is None:
            problems.append(f"{key}: not a PEFT lora_A / lora_B weight")
            continue
        module, part = match.groups()
        base = schema.get(f"{module}.weight")
        if base is None:
            problems.append(f"{key}: the served model has no {module}.weight")
            continue
        out_dim, in_dim = base[1][0], base[1][-1]
        r = _rank(config, module)
        want = (r, in_dim) if part == "A" else (out_dim, r)
        if tuple(t.shape) != want:
            problems.append(f"{key}: shape {list(t.shape)} != {list(want)} (rank {r}, base {list(base[1])})")
    return problems


def _rank(config: Any, module: str) -> int:
    """The module's rank: PEFT's `rank_pattern` (suffix patterns) over the config's `r`."""
    for pattern, r in (getattr(config, "rank_pattern", None) or {}).items():
        if re.match(rf"(.*\.)?{pattern}$", module):
            return int(r)
    return int(config.r)


class ServerAdapters:
    """The adapters one publisher serves on one vLLM server."""

    def __init__(self, control: ControlClient, adapter_dir: str | Path, *, keep_last: int = 2) -> None:
        if keep_last < 1:
            raise ValueError(f"keep_last must be >= 1, got {keep_last}")
        self.control, self.keep_last = control, keep_last
        self.adapter_dir = Path(adapter_dir).resolve()  # the server reads it: an absolute path
        self.paths: dict[str, Path] | None = None  # loaded name -> its files, oldest first; None until synced
        self._unloaded_dirs: list[Path] = []  # deleted at the next publish
        self._schema: dict[str, tuple[str, tuple[int, ...]]] | None = None

    @property
    def loaded(self) -> list[str]:
        """The adapters this publisher serves, oldest first."""
        return list(self._sync())

    # ---- what the server serves -----------------------------------------
    def models(self) -> list[dict[str, Any]]:
        """GET /v1/models: the base and every loaded adapter (`root` is an adapter's path)."""
        return list(self.control.get("/v1/models").get("data", []))

    def _sync(self) -> dict[str, Path]:
        if self.paths is None:
            cards = sorted((m for m in self.models() if adapter_version(m["id"]) is not None),
                           key=lambda m: adapter_version(m["id"]) or 0)
            self.paths = {m["id"]: Path(m.get("root") or self.adapter_dir / m["id"]) for m in cards}
            if self.paths:
                log.info("%s already serves adapters %s: taking them over", self.control.root_url, list(self.paths))
            served = set(self.paths.values())  # files of adapters no longer served (a dead run's): go next publish
            self._unloaded_dirs += [d for d in self.adapter_dir.glob("policy-v*")
                                    if d.is_dir() and d not in served]
        return self.paths

    # ---- publish ----------------------------------------------------------
    def publish(self, tensors: Mapping[str, Any], config: Any, *, version: int) -> PublishedAdapter:
        """Write the adapter of `version` and load it (older ones stay until `evict`)."""
        paths = self._sync()
        name = adapter_name(version)
        problems = adapter_problems(tensors, config, self._served_schema())
        if problems:
            raise AdapterLoadError(f"refusing to publish adapter {name!r} to {self.control.root_url}: "
                                   + "; ".join(problems[:6]) + f" ({len(problems)} in all). Nothing was sent; "
                                   f"the server keeps serving {_newest(paths)}")
        t0 = time.perf_counter()  # a republished version (a resumed run) replaces the old in place
        path = self._write(name, tensors, config)
        try:
            self.load_dir(name, path)
        except AdapterLoadError:
            shutil.rmtree(path, ignore_errors=True)
            raise
        secs = time.perf_counter() - t0
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        done = PublishedAdapter(name, int(version), str(path), size, secs)
        with open(self.adapter_dir / PUBLISHED_LOG, "a", encoding="utf-8") as log_file:
            log_file.write(json.dumps(asdict(done)) + "\n")
        return done

    def load_dir(self, name: str, path: str | Path) -> None:
        """Serve the adapter directory `path` (PEFT files; the server reads them itself)
        as `name`, replacing an adapter of that name in place. Older ones stay until `evict`."""
        paths, path = self._sync(), Path(path).resolve()
        load_adapter(self.control, name, path, replace=name in paths, serving=_newest(paths))
        if name in paths:
            self._unloaded_dirs.append(paths.pop(name))
        paths[name] = path

    def evict(self) -> list[str]:
        """Unload what is beyond `keep_last` (oldest first); delete the files of earlier unloads."""
        for old in self._unloaded_dirs:
            mine = self._written_here(old)
            if mine is not None:
                shutil.rmtree(mine, ignore_errors=True)
        self._unloaded_dirs = []
        paths = self._sync()
        gone = to_unload(list(paths), self.keep_last)
        for name in gone:
            unload_adapter(self.control, name)
            self._unloaded_dirs.append(paths.pop(name))
        return gone

    def _written_here(self, path: Path) -> Path | None:
        """`path` resolved, if it is an adapter directory this publisher wrote: a real
        directory (no symlink) named as `_write` names them, directly in adapter_dir.
        Never anything else: the paths come from the server's `/v1/models`, which may
        name `<adapter_dir>/..`, a symlink out, or a directory of the run's."""
        resolved = path.resolve()
        if path.is_symlink() or resolved.parent != self.adapter_dir or not _OWN_NAME.fullmatch(resolved.name):
            log.warning("not deleting %s: not an adapter directory this publisher wrote in %s", path,
                        self.adapter_dir)
            return None
        return resolved if resolved.is_dir() and not resolved.is_symlink() else None

    def _served_schema(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        """The served checkpoint's tensor names and shapes (ludic's worker extension), fetched once."""
        if self._schema is None:
            results = self.control.post("/collective_rpc", json={"method": "ludic_weight_schema"})["results"]
            self._schema = {k: (d, tuple(shape)) for k, (d, shape) in results[0].items()}
        return self._schema

    def _write(self, name: str, tensors: Mapping[str, Any], config: Any) -> Path:
        """PEFT files in a new directory adapter_dir/NAME (NAME.2, ... for a republished
        version), renamed into place once complete."""
        from ludic_core.lora.adapter_dir import write_adapter_dir

        final, k = self.adapter_dir / name, 1
        while final.exists():
            k += 1
            final = self.adapter_dir / f"{name}.{k}"
        tmp = self.adapter_dir / f".{final.name}.{os.getpid()}.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        write_adapter_dir(tmp, tensors, config, None)
        os.replace(tmp, final)
        return final


def load_adapter(control: ControlClient, name: str, path: str | Path, *, replace: bool = False,
                 serving: str = "what it served") -> None:
    """POST /v1/load_lora_adapter: serve the adapter directory `path` as `name`
    (`replace`: in place of a loaded one). A refusal is an `AdapterLoadError`
    naming the adapter, the path and the server's reason; nothing changed then."""
    try:
        control.post("/v1/load_lora_adapter", json={"lora_name": name, "lora_path": str(path), "load_inplace": replace})
    except InferenceServerError as exc:
        raise AdapterLoadError(f"vLLM at {control.root_url} refused adapter {name!r} from {path}: {_reason(exc)}; "
                               f"it keeps serving {serving}") from exc


def unload_adapter(control: ControlClient, name: str) -> None:
    """POST /v1/unload_lora_adapter; an adapter that is already gone only gets a warning."""
    try:
        control.post("/v1/unload_lora_adapter", json={"lora_name": name})
    except InferenceServerError as exc:
        log.warning("could not unload adapter %s from %s: %s", name, control.root_url, exc)


def _newest(paths: Mapping[str, Path]) -> str:
    return repr(list(paths)[-1]) if paths else "the base model only"


def _reason(exc: InferenceServerError) -> str:
    """The server's own message (without the route and URL the caller names), and what it means."""
    text = str(exc)
    marker = "answered "
    reason = text[text.index(marker) + len(marker):] if marker in text else text
    if reason.strip() == "404: Not Found":
        reason += (" (no runtime LoRA routes: start the server with LoRA serving, "
                   "VLLMServerConfig.max_lora_rank or `ludic serve --lora-rank N`)")
    elif "No adapter found" in reason:
        reason += " (the server reads the files itself: is the directory on storage it sees?)"
    return reason
