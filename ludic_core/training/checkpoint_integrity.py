"""A checkpoint proves itself before it is trusted: a sha256 manifest and a checked trainer state.

Why: safetensors and JSON only check their own syntax. 100 bytes of 0xFF in a
weights file loaded as NaN parameters, a flipped bit in an optimizer moment or
a `"step": -5` loaded without a word, and a damaged file that did fail named
no file. So `save_checkpoint` writes `manifest.json` last inside its `.tmp-*`
directory (before the atomic rename): the sha256 and size of every other file,
plus the sha256 of that list itself, so a damaged manifest is told apart from a
damaged file. `verify_files` recomputes them before anything is read; a file
missing, added (a stray `model/*.safetensors` would be loaded with the rest),
resized or changed raises `CheckpointCorrupt` naming the file and the
checkpoint. Checkpoints from before manifests (format 1) load with a warning
that they are unverified; a format-2 checkpoint without one is corrupt.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from pathlib import Path
from typing import Any

__all__ = ["CORRUPT_MARKER", "CheckpointCorrupt", "FORMAT_VERSION", "MANIFEST", "REQUIRED", "candidates", "check",
           "corrupt", "none_intact", "read_json", "read_trainer_state", "step_of", "verified_checkpoint", "verify_files",
           "warn_fallback", "write_manifest"]

#: 1: no manifest (unverified); 2: `manifest.json` holds every file's sha256.
FORMAT_VERSION = 2
MANIFEST = "manifest.json"
#: the files every checkpoint holds besides `model/*.safetensors`
REQUIRED = ("trainer_state.json", "optimizer.json", "optimizer.safetensors", "rng.safetensors", "scheduler.json")
_STEP_DIR = re.compile(r"^step_(\d{8})$")
_CHUNK = 1 << 20
#: What a torchrun rank prints before failing on a corrupt checkpoint (`stages.launch.run_torchrun` reads it).
CORRUPT_MARKER = "ludic-checkpoint-corrupt: "

log = logging.getLogger(__name__)


class CheckpointCorrupt(ValueError):
    """A checkpoint's bytes are not what was saved. Retrying reads the same bytes:
    fall back to an older checkpoint, never retry, never restart from step 0.

    `(message)` alone rebuilds one that crossed ranks or processes as text."""

    def __init__(self, message: str, checkpoint: str = "", file: str = "") -> None:
        super().__init__(message)
        self.checkpoint, self.file = checkpoint, file


def corrupt(ckpt: Path | str, file: str, reason: str) -> CheckpointCorrupt:
    """The refusal of one checkpoint, naming it and its bad file."""
    return CheckpointCorrupt(f"checkpoint {ckpt} is corrupt: {file}: {reason}", str(ckpt), file)


def step_of(ckpt: Path) -> int | None:
    """The step a `step_{step:08d}` directory's name encodes (None for any other name)."""
    match = _STEP_DIR.match(ckpt.name)
    return int(match.group(1)) if match else None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _files(ckpt: Path) -> list[str]:
    """Every regular file under `ckpt` but the manifest, as sorted POSIX paths relative to it."""
    return sorted(p.relative_to(ckpt).as_posix() for p in ckpt.rglob("*")
                  if (p.is_file() or p.is_symlink()) and p.relative_to(ckpt).as_posix() != MANIFEST)


def _seal(files: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(files, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def write_manifest(ckpt: Path) -> None:
    """Record the sha256 and size of every file in `ckpt` (call it after the last other file)."""
    files = {rel: {"sha256": _sha256(ckpt / rel), "bytes": (ckpt / rel).stat().st_size} for rel in _files(ckpt)}
    manifest = {"format": FORMAT_VERSION, "algorithm": "sha256", "files": files, "seal": _seal(files)}
    (ckpt / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))


def read_json(ckpt: Path, rel: str) -> Any:
    """A checkpoint's JSON file; unreadable or malformed bytes are `CheckpointCorrupt` naming it."""
    try:
        return json.loads((ckpt / rel).read_bytes().decode("utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise corrupt(ckpt, rel, f"unreadable ({type(exc).__name__}: {exc})") from exc


def _manifest_files(ckpt: Path) -> dict[str, dict[str, Any]]:
    """The manifest's file table, after checking the manifest's own shape and seal."""
    manifest = read_json(ckpt, MANIFEST)
    files = manifest.get("files") if isinstance(manifest, dict) else None
    if not isinstance(files, dict) or manifest.get("algorithm") != "sha256":
        raise corrupt(ckpt, MANIFEST, "not a sha256 manifest (no 'files' table)")
    if manifest.get("seal") != _seal(files):
        raise corrupt(ckpt, MANIFEST, "its seal does not match its file table (the manifest is damaged)")
    for rel, entry in files.items():
        ok = isinstance(entry, dict) and isinstance(entry.get("sha256"), str) and isinstance(entry.get("bytes"), int)
        if not ok:
            raise corrupt(ckpt, MANIFEST, f"malformed entry for {rel!r}")
    return files


def verify_files(ckpt: Path) -> bool:
    """Check every file against the manifest: True when verified, False for an unverified
    format-1 checkpoint (warned); raises `CheckpointCorrupt` naming the first bad file."""
    if not (ckpt / MANIFEST).exists():
        state = read_json(ckpt, "trainer_state.json") if (ckpt / "trainer_state.json").is_file() else {}
        if isinstance(state, dict) and state.get("format") == 1:
            log.warning("checkpoint %s predates manifests (format 1): loading it unverified", ckpt)
            return False
        raise corrupt(ckpt, MANIFEST, "missing (every checkpoint since format 2 has one)")
    files = _manifest_files(ckpt)
    present = _files(ckpt)
    added = sorted(set(present) - set(files))
    if added:
        raise corrupt(ckpt, ", ".join(added), "not in the manifest (added after the save)")
    for rel, entry in sorted(files.items()):
        path = ckpt / rel
        if rel not in present or path.is_symlink():
            raise corrupt(ckpt, rel, "missing (or a symlink) but listed in the manifest")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise corrupt(ckpt, rel, f"{size} bytes, the manifest says {entry['bytes']} (truncated?)")
        if _sha256(path) != entry["sha256"]:
            raise corrupt(ckpt, rel, "sha256 differs from the manifest's (bytes changed after the save)")
    return True


def _need_int(ckpt: Path, state: dict, field: str, minimum: int) -> int:
    value = state.get(field)
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise corrupt(ckpt, "trainer_state.json",
                                f"field {field!r} is {value!r}, not an integer >= {minimum}")
    return value


def read_trainer_state(ckpt: Path) -> dict[str, Any]:
    """`trainer_state.json`, checked field by field: a non-negative integer step equal to
    the one the directory's name encodes, a known format, and the parts a load reads."""
    rel = "trainer_state.json"
    state = read_json(ckpt, rel)
    if not isinstance(state, dict):
        raise corrupt(ckpt, rel, f"a JSON {type(state).__name__}, not an object")
    step = _need_int(ckpt, state, "step", 0)
    if step_of(ckpt) is not None and step != step_of(ckpt):
        raise corrupt(ckpt, rel, f"field 'step' is {step}, but the directory is {ckpt.name}")
    if state.get("format") not in (1, FORMAT_VERSION):
        raise corrupt(ckpt, rel, f"field 'format' is {state.get('format')!r}, not 1 or {FORMAT_VERSION}")
    world_size = _need_int(ckpt, state, "world_size", 1)
    fingerprint = state.get("model_fingerprint")
    if not isinstance(fingerprint, dict) or not isinstance(fingerprint.get("params"), list):
        raise corrupt(ckpt, rel, "field 'model_fingerprint' is not an object with a 'params' list")
    if not isinstance(state.get("data"), dict):
        raise corrupt(ckpt, rel, f"field 'data' is {type(state.get('data')).__name__}, not an object")
    rng = state.get("rng")
    if not isinstance(rng, list) or len(rng) != world_size:
        raise corrupt(ckpt, rel, f"field 'rng' is not a list of one state per rank ({world_size})")
    return state


def check(ckpt: Path) -> dict[str, Any]:
    """Everything a load trusts, checked before any tensor is read; returns the trainer state."""
    verify_files(ckpt)
    missing = [rel for rel in REQUIRED if not (ckpt / rel).is_file()]
    if not any((ckpt / "model").glob("*.safetensors")):
        missing.append("model/*.safetensors")
    if missing:
        raise corrupt(ckpt, ", ".join(missing), "missing")
    return read_trainer_state(ckpt)


def candidates(root: Path) -> list[Path]:
    """The `step_*` directories a resume may use, in trust order: the one `ROOT/latest`
    names first, then the rest newest first. Incomplete ones are included: a `step_*`
    directory exists only after a complete save's rename, so a gap in one is damage."""
    if not root.is_dir():
        return []
    steps = {p: step for p in root.iterdir() if (step := step_of(p)) is not None and p.is_dir()}
    dirs = sorted(steps, key=steps.__getitem__, reverse=True)
    latest = root / "latest"
    named = ""
    if latest.is_file():
        with open(latest, "rb") as f:
            named = f.read(64).decode("utf-8", errors="replace").strip()  # a name, never a big file
    first = [p for p in dirs if p.name == named]
    return first + [p for p in dirs if p.name != named]


def none_intact(root: Path, errors: list[CheckpointCorrupt]) -> CheckpointCorrupt:
    """No checkpoint in `root` survived its checks: name each, and refuse to start over."""
    listed = "; ".join(str(e) for e in errors)
    return CheckpointCorrupt(f"no intact checkpoint in {root}: {listed}. Not starting again from step 0: restore "
                             f"a checkpoint, or move these away to start from scratch on purpose",
                             str(root), ", ".join(e.file for e in errors))


def warn_fallback(exc: CheckpointCorrupt) -> None:
    log.warning("%s; falling back to the previous checkpoint", exc)


def verified_checkpoint(root: str | Path) -> Path | None:
    """The newest intact checkpoint in `root` (warning for each corrupt one passed over);
    None when there is none at all; `CheckpointCorrupt` when every one is corrupt."""
    root, errors = Path(root), []
    for ckpt in candidates(root):
        try:
            check(ckpt)
            return ckpt
        except CheckpointCorrupt as exc:
            warn_fallback(exc)
            errors.append(exc)
    if errors:
        raise none_intact(root, errors)
    return None
