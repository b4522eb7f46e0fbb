"""`ludic serve` started the way a user does, for the fixtures that need a real vLLM server: the
session's shared one (with LoRA slots) and the distillation teacher's own (without them)."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import pytest

__all__ = ["serve_tiny_model"]


@contextmanager
def serve_tiny_model(model_dir: Path, log_dir: Path,
                     extra_args: Sequence[str] = ()) -> Iterator[tuple[dict[str, Any], str, int]]:
    """`ludic serve --model DIR ...EXTRA` on a free port with a fresh API key; yields (the JSON
    line it prints once /health answers, the key, the pid of `ludic serve`). Fails the test if it
    exits before printing that line; stopped by SIGTERM (which stops the server's process group)."""
    from ludic_core.ports import free_port

    key, port = secrets.token_urlsafe(16), free_port()
    cli = subprocess.Popen(
        [sys.executable, "-m", "flows.cli", "serve", "--model", str(model_dir), "--port", str(port),
         "--log-dir", str(log_dir), *extra_args],
        env={**os.environ, "LUDIC_VLLM_API_KEY": key}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert cli.stdout is not None
    seen = []  # warnings may come first; the JSON line comes once /health answers
    for line in cli.stdout:
        if line.startswith("{"):
            break
        seen.append(line)
    else:
        cli.kill()
        pytest.fail("`ludic serve` did not start:\n" + "".join(seen)[-3000:])
    # keep reading what it prints later, so a full pipe can never block it mid-test
    threading.Thread(target=cli.stdout.readlines, daemon=True).start()
    try:
        yield json.loads(line), key, cli.pid
    finally:
        cli.send_signal(signal.SIGTERM)
        cli.wait(timeout=60)
