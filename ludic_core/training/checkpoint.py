"""Resumable training checkpoints: safetensors + JSON, atomic, world-size independent.

One checkpoint is `ROOT/step_{step:08d}/`:

    model/                   HF `save_pretrained` output (+ tokenizer): publishable as is;
                             a LoRA run's is its adapter (PEFT files + base pointer, `lora.adapter_dir`)
    optimizer.safetensors    every optimizer tensor, e.g. `state.<param fqn>.exp_avg`
    optimizer.json           the rest of the optimizer state dict (param_groups, ...)
    scheduler.json           `scheduler.state_dict()` (JSON-able entries only)
    rng.safetensors          torch CPU (and CUDA) RNG state of every rank
    trainer_state.json       step, caller's `data` state, python/numpy RNG, model fingerprint
    manifest.json            sha256 + size of every other file, written last (`checkpoint_integrity`)

Why this shape: no pickle (a checkpoint is data, never code); full (unsharded)
state keyed by parameter FQN, so a run saved on N ranks resumes on M; rank 0
writes into a `.tmp-*` sibling and renames it, so a crash never leaves a
half-written `step_*` directory that looks complete. A load checks every
file against the manifest first; loading a run's root falls back past a corrupt
checkpoint to the newest intact one (with a warning naming the file), and
raises `CheckpointCorrupt` naming them all when none is intact, never
starting over from step 0.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from ludic_core.lora.peft_model import is_lora
from ludic_core.training.checkpoint_adapter import adapter_state_for, require_adapter, write_adapter
from ludic_core.training.checkpoint_identity import canonical, check_fingerprint, fingerprint, state_keys, tied_groups
from ludic_core.training.checkpoint_integrity import (
    FORMAT_VERSION,
    REQUIRED,
    CheckpointCorrupt,
    candidates,
    check,
    corrupt,
    none_intact,
    read_json,
    verified_checkpoint,
    warn_fallback,
    write_manifest,
)
from ludic_core.training.checkpoint_state import (
    decode,
    encode,
    jsonable_entries,
    map_device_states,
    restore_rng,
    rng_snapshot,
    to_tensor,
)
from ludic_core.training.distributed import DistContext, all_gather_json, broadcast_object_json

__all__ = ["CheckpointCorrupt", "complete_checkpoints", "latest_checkpoint", "load_checkpoint", "load_model_weights",
           "save_checkpoint", "verified_checkpoint"]

_STEP_DIR = re.compile(r"^step_(\d{8})$")
_REQUIRED = REQUIRED
log = logging.getLogger(__name__)


# ---------------------------------------------------------------- files


def _is_complete(d: Path) -> bool:
    return d.is_dir() and all((d / f).is_file() for f in _REQUIRED) and any((d / "model").glob("*.safetensors"))


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _fsync(path.parent)


def _step_dirs(root: Path) -> list[tuple[int, Path]]:
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and p.is_dir()]
    return sorted(found)


def _clean_stale_tmp(root: Path) -> None:
    """Leftovers of a crashed save: never complete, never referenced by `latest`."""
    for p in root.iterdir():
        if ".tmp-" in p.name:
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)


def _prune(root: Path, keep: Path, keep_last: int | None) -> None:
    if keep_last is None:
        return
    others = [p for _, p in _step_dirs(root) if p != keep]
    for p in others[: max(len(others) - (keep_last - 1), 0)]:
        shutil.rmtree(p, ignore_errors=True)


def _write_model(model: nn.Module, state: dict[str, torch.Tensor], out: Path, tokenizer: Any) -> None:
    if is_lora(model):
        return write_adapter(model, state, out, tokenizer)
    out.mkdir(parents=True)
    if hasattr(model, "save_pretrained"):
        pretrained: Any = model  # a transformers model
        pretrained.save_pretrained(out, state_dict=state)  # drops tied duplicates, writes config
    else:
        save_file(state, out / "model.safetensors", metadata={"format": "pt"})
    if tokenizer is not None:
        tokenizer.save_pretrained(out)


def _write_files(
    tmp: Path, step: int, model: nn.Module, model_sd: dict, optim_sd: dict, scheduler: Any,
    tokenizer: Any, data_state: dict | None, rng_snaps: list[dict[str, Any]],
) -> None:  # fmt: skip
    _write_model(model, model_sd, tmp / "model", tokenizer)
    optim_tensors: dict[str, torch.Tensor] = {}
    optim_json = {"state": encode(optim_sd["state"], "state", optim_tensors),
                  "param_groups": encode(optim_sd["param_groups"], "param_groups", optim_tensors)}  # fmt: skip
    save_file(optim_tensors, tmp / "optimizer.safetensors")
    (tmp / "optimizer.json").write_text(json.dumps(optim_json))
    sched = None if scheduler is None else jsonable_entries(scheduler.state_dict(), "scheduler")
    (tmp / "scheduler.json").write_text(json.dumps(sched))
    rng_tensors: dict[str, torch.Tensor] = {}
    rng_meta = encode([map_device_states(r, to_tensor) for r in rng_snaps], "rank", rng_tensors)
    save_file(rng_tensors, tmp / "rng.safetensors")
    state = {"format": FORMAT_VERSION, "step": step, "data": data_state or {}, "world_size": len(rng_snaps),
             "model_fingerprint": fingerprint(model), "rng": rng_meta}  # fmt: skip
    (tmp / "trainer_state.json").write_text(json.dumps(state))
    write_manifest(tmp)  # last: the hash of every file above, before the atomic rename


def _publish(root: Path, tmp: Path, final: Path) -> None:
    """Atomically move `tmp` to `final` (replacing an older save of the same step) and point `latest` at it."""
    for p in [*sorted(tmp.rglob("*"), reverse=True), tmp]:  # durable contents before the rename
        _fsync(p)
    if final.exists():
        trash = root / f"{final.name}.tmp-old-{uuid.uuid4().hex[:8]}"
        os.replace(final, trash)
        os.replace(tmp, final)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        os.replace(tmp, final)
    _fsync(root)
    _write_text_atomic(root / "latest", final.name + "\n")


# ---------------------------------------------------------------- public API


def save_checkpoint(
    root: str | Path,
    step: int,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any = None,
    ctx: DistContext,
    tokenizer: Any = None,
    data_state: dict | None = None,
    keep_last: int | None = 3,
) -> Path:
    """Write `ROOT/step_{step:08d}` atomically, update `ROOT/latest`, keep the newest `keep_last`.

    Every rank must call it (gathering FSDP shards is collective); only rank 0
    writes. `data_state` (JSON) is the caller's resume position, e.g. the batch
    source's cursor. `keep_last=None` keeps every checkpoint. Returns the path.
    """
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict

    if keep_last is not None and keep_last < 1:
        raise ValueError(f"keep_last must be >= 1 or None, got {keep_last}")
    root = Path(root)
    final = root / f"step_{step:08d}"
    # a LoRA run stores its adapter only: the frozen base is never gathered
    options = StateDictOptions(full_state_dict=True, cpu_offload=True, ignore_frozen_params=is_lora(model))
    model_sd, optim_sd = get_state_dict(model, optimizer, options=options)
    rng_snaps = all_gather_json(rng_snapshot(), ctx)
    error = None
    if ctx.is_main:
        try:
            root.mkdir(parents=True, exist_ok=True)
            _clean_stale_tmp(root)
            tmp = root / f"{final.name}.tmp-{uuid.uuid4().hex[:8]}"
            tmp.mkdir()
            _write_files(tmp, step, model, model_sd, optim_sd, scheduler, tokenizer, data_state, rng_snaps)
            _publish(root, tmp, final)
            _prune(root, final, keep_last)
        except Exception as e:
            error = e
    # Doubles as the closing barrier, and stops other ranks from carrying on after a failed save.
    status = broadcast_object_json(None if error is None else f"{type(error).__name__}: {error}", ctx)
    if error is not None:
        raise error
    if status is not None:
        raise RuntimeError(f"rank 0 failed to save checkpoint {final}: {status}")
    return final


def latest_checkpoint(root: str | Path) -> Path | None:
    """The checkpoint `ROOT/latest` names, else the highest complete `step_*`; never a `.tmp-*`."""
    root = Path(root)
    if not root.is_dir():
        return None
    latest = root / "latest"
    if latest.is_file():
        name = latest.read_text().strip()
        if _STEP_DIR.match(name) and _is_complete(root / name):
            return root / name
    complete = complete_checkpoints(root)
    return complete[-1][1] if complete else None


def complete_checkpoints(root: str | Path) -> list[tuple[int, Path]]:
    """(step, dir) of every complete `ROOT/step_*`, oldest first (none where ROOT is missing)."""
    root = Path(root)
    return [(step, p) for step, p in _step_dirs(root) if _is_complete(p)] if root.is_dir() else []


def _names_one(p: Path) -> bool:
    """Whether `p` names one checkpoint (else a run's root, whose newest intact one is meant)."""
    return ".tmp-" in p.name or (p / "trainer_state.json").exists() or bool(_STEP_DIR.match(p.name))


def _require_complete(p: Path) -> None:
    if not _is_complete(p) or ".tmp-" in p.name:
        missing = [f for f in (*_REQUIRED, "model/*.safetensors") if not list(p.glob(f))]
        raise FileNotFoundError(f"checkpoint {p} is missing, unfinished or incomplete (lacks {missing})")


def _tensors(ckpt: Path, rel: str) -> dict[str, torch.Tensor]:
    """One safetensors file of a checkpoint; unreadable bytes are `CheckpointCorrupt` naming it."""
    try:
        return load_file(ckpt / rel)
    except (SafetensorError, OSError) as exc:
        raise corrupt(ckpt, rel, f"unreadable safetensors ({exc})") from exc


def load_model_weights(path: str | Path) -> dict[str, torch.Tensor]:
    """The model tensors of a checkpoint (its `model/` dir) or of any HF safetensors directory."""
    p = Path(path)
    d = p / "model" if (p / "model").is_dir() else p
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors model files in {d}")
    weights: dict[str, torch.Tensor] = {}
    for f in files:
        weights.update(_tensors(p, f.relative_to(p).as_posix()))
    return weights


def _model_state_for(model: nn.Module, ckpt: Path) -> dict[str, torch.Tensor]:
    """The checkpoint's weights keyed exactly as `model`'s state dict (tied names restored)."""
    if is_lora(model):
        return adapter_state_for(model, ckpt / "model", state_keys(model))
    weights = {canonical(k): v for k, v in load_model_weights(ckpt).items()}
    for group in tied_groups(model):
        source = next((weights[n] for n in group if n in weights), None)
        for n in group:
            if source is not None:
                weights.setdefault(n, source)
    expected = state_keys(model)
    missing = [k for k in expected if k not in weights]
    if missing:
        raise ValueError(f"checkpoint {ckpt}/model lacks tensors the model needs, e.g. {missing[:3]}")
    return {k: weights[k] for k in expected}


def _decoded(ckpt: Path, rel_json: str, rel_tensors: str, skeleton: Any = None) -> Any:
    """A JSON skeleton with its tensors put back; a skeleton naming absent tensors is corrupt."""
    skeleton = read_json(ckpt, rel_json) if skeleton is None else skeleton
    try:
        return decode(skeleton, _tensors(ckpt, rel_tensors))
    except (KeyError, TypeError, ValueError) as exc:
        raise corrupt(ckpt, rel_json, f"does not match {rel_tensors} ({type(exc).__name__}: {exc})") from exc


def _read_one(ckpt: Path, model: nn.Module, want_optim: bool) -> tuple[dict, dict, dict]:
    """Check (manifest, trainer state, fingerprint) and read one checkpoint; raises on a bad one."""
    state = check(ckpt)
    if is_lora(model):  # the clearer refusal first: full weights where an adapter should be
        require_adapter(ckpt / "model")
    check_fingerprint(model, state["model_fingerprint"], ckpt)
    rng_snaps = _decoded(ckpt, "trainer_state.json", "rng.safetensors", state.pop("rng"))
    try:
        rng = [map_device_states(r, torch.Tensor.tolist) for r in rng_snaps]
    except (KeyError, TypeError, AttributeError) as exc:
        raise corrupt(ckpt, "trainer_state.json", f"field 'rng' is malformed ({exc!r})") from exc
    header = {"path": str(ckpt), "trainer_state": state, "rng": rng, "scheduler": read_json(ckpt, "scheduler.json")}
    model_sd = _model_state_for(model, ckpt)
    optim_sd: dict = _decoded(ckpt, "optimizer.json", "optimizer.safetensors") if want_optim else {}
    return header, model_sd, optim_sd


def _read_rank0(ckpt_arg: str | Path, model: nn.Module, want_optim: bool) -> tuple[dict, dict, dict]:
    """Rank 0: one named checkpoint as is; a run's root: its newest intact checkpoint."""
    p = Path(ckpt_arg)
    if _names_one(p):
        _require_complete(p)
        return _read_one(p, model, want_optim)
    errors: list[CheckpointCorrupt] = []
    for ckpt in candidates(p):
        try:
            found = _read_one(ckpt, model, want_optim)
        except CheckpointCorrupt as exc:
            warn_fallback(exc)
            errors.append(exc)
            continue
        if errors:
            log.warning("resuming from %s, the newest intact checkpoint in %s", ckpt, p)
        return found
    if errors:
        raise none_intact(p, errors)
    raise FileNotFoundError(f"no complete checkpoint in {p}")


def _retuple_param_groups(optimizer: torch.optim.Optimizer) -> None:
    """set_optimizer_state_dict turns tuples (Adam's betas) into lists; restore the defaults' type."""
    for group in optimizer.param_groups:
        for key, default in optimizer.defaults.items():
            if isinstance(default, tuple) and isinstance(group.get(key), list):
                group[key] = tuple(group[key])


def load_checkpoint(
    path_or_root: str | Path,
    *,
    model: nn.Module,
    optimizer: torch.optim.Optimizer | None = None,
    scheduler: Any = None,
    ctx: DistContext,
) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG from a checkpoint (or ROOT's latest).

    Every rank calls it; rank 0 reads the files and the tensors reach the other
    ranks by broadcast, resharded to the current world size. A checkpoint of
    another model raises ValueError before the model is touched; a missing or
    partial one raises FileNotFoundError; a damaged one `CheckpointCorrupt`
    (given a run's root: only when no intact checkpoint is left). Returns the trainer state: `step`,
    `data` (as given to `save_checkpoint`), `world_size`, `path`, ...
    """
    from torch.distributed.checkpoint.state_dict import (
        StateDictOptions,
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    header: dict[str, Any] = {}
    model_sd: dict[str, Any] = {}
    optim_sd: dict[str, Any] = {}
    error = None
    if ctx.is_main:
        try:
            header, model_sd, optim_sd = _read_rank0(path_or_root, model, optimizer is not None)
        except Exception as e:  # every rank must learn of it, or the others hang in a collective
            error, header = e, {"error": type(e).__name__, "message": str(e)}
    header = broadcast_object_json(header, ctx)
    if error is not None:
        raise error
    if "error" in header:
        kinds = {"FileNotFoundError": FileNotFoundError, "ValueError": ValueError,
                 "CheckpointCorrupt": CheckpointCorrupt}
        kind = kinds.get(header["error"], RuntimeError)
        raise kind(header["message"])
    if scheduler is not None and header["scheduler"] is None:
        raise ValueError(f"checkpoint {header['path']} was saved without a scheduler")
    # set_state_dict would skip the model on ranks whose model_state_dict is empty (it treats
    # that as "optimizer only") and hang rank 0's broadcast, so load the two separately.
    # an adapter checkpoint holds the trainable tensors only: the base stays as loaded
    options = StateDictOptions(full_state_dict=True, broadcast_from_rank0=ctx.is_distributed, strict=not is_lora(model))
    if optimizer is not None:
        set_optimizer_state_dict(model, optimizer, optim_sd, options=options)
        _retuple_param_groups(optimizer)
    set_model_state_dict(model, model_sd, options=options)
    if scheduler is not None:
        scheduler.load_state_dict(header["scheduler"])
    restore_rng(header["rng"][ctx.rank % len(header["rng"])])
    return {**header["trainer_state"], "path": header["path"]}
