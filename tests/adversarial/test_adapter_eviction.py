"""The adapter publisher deletes only adapter directories it wrote, inside adapter_dir.

Issue 54: the guard compared `old.parent == adapter_dir` without normalising, so a
served adapter whose root was `<adapter_dir>/..` passed it and the next `evict()`
emptied the run directory, checkpoints included. The server's `/v1/models` is
outside input: each case here makes it name a root the publisher must not delete
(a stand-in server, since only the paths it reports matter), and evicts twice (the
first unloads, the second deletes files).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ludic_core.vllm.adapters import ServerAdapters


class StandInServer:
    """The two routes the publisher reads and the two it posts to, over a list of model cards."""

    root_url = "http://stand-in"

    def __init__(self, roots: dict[str, str]) -> None:
        self.cards = [{"id": "base"}] + [{"id": name, "root": root} for name, root in roots.items()]

    def get(self, route: str) -> dict[str, Any]:
        assert route == "/v1/models"
        return {"data": list(self.cards)}

    def post(self, route: str, json: dict[str, Any] | None = None) -> dict[str, Any]:
        name = (json or {}).get("lora_name")
        if route == "/v1/unload_lora_adapter":
            self.cards = [c for c in self.cards if c["id"] != name]
        elif route == "/v1/load_lora_adapter":
            self.cards.append({"id": name, "root": json["lora_path"]})
        return {}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A run directory as a flow lays it out: checkpoints beside the adapters."""
    run = tmp_path / "run"
    (run / "checkpoints" / "step_00000002").mkdir(parents=True)
    (run / "checkpoints" / "step_00000002" / "trainer_state.json").write_text("{}")
    (run / "adapters").mkdir()
    return run


def _evict_twice(adapters: ServerAdapters) -> None:
    adapters.evict()  # unloads what is beyond keep_last
    adapters.evict()  # deletes the files of those unloads


def _own(adapter_dir: Path, name: str) -> Path:
    d = adapter_dir / name
    d.mkdir()
    (d / "adapter_model.safetensors").write_bytes(b"x")
    return d


@pytest.mark.parametrize("suffix", ["..", "../..", "policy-v1/..", "../adapters/.."])
def test_a_served_root_that_climbs_out_of_adapter_dir_is_never_deleted(run_dir, suffix):
    adapter_dir = run_dir / "adapters"
    newest = _own(adapter_dir, "policy-v2")
    server = StandInServer({"policy-v1": f"{adapter_dir}/{suffix}", "policy-v2": str(newest)})
    _evict_twice(ServerAdapters(server, adapter_dir, keep_last=1))
    assert (run_dir / "checkpoints" / "step_00000002" / "trainer_state.json").is_file()
    assert newest.is_dir() and [c["id"] for c in server.cards] == ["base", "policy-v2"]


def test_a_symlink_in_adapter_dir_never_leads_the_delete_outside(run_dir, tmp_path):
    adapter_dir = run_dir / "adapters"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "precious.bin").write_bytes(b"keep")
    os.symlink(outside, adapter_dir / "policy-v1")  # named as the publisher names its own
    os.symlink(run_dir / "checkpoints", adapter_dir / "policy-v7")  # an unserved one, swept by name
    newest = _own(adapter_dir, "policy-v2")
    server = StandInServer({"policy-v1": str(adapter_dir / "policy-v1"), "policy-v2": str(newest)})
    _evict_twice(ServerAdapters(server, adapter_dir, keep_last=1))
    assert (outside / "precious.bin").read_bytes() == b"keep"
    assert (run_dir / "checkpoints" / "step_00000002" / "trainer_state.json").is_file()


def test_a_directory_in_adapter_dir_the_publisher_did_not_name_is_kept(run_dir):
    """adapter_dir set to the run directory itself: a served root `<run>/checkpoints` is not an adapter of ours."""
    newest = _own(run_dir, "policy-v2")
    server = StandInServer({"policy-v1": str(run_dir / "checkpoints"), "policy-v2": str(newest)})
    _evict_twice(ServerAdapters(server, run_dir, keep_last=1))
    assert (run_dir / "checkpoints" / "step_00000002" / "trainer_state.json").is_file()


def test_the_publishers_own_unloaded_adapters_are_still_deleted(run_dir):
    adapter_dir = run_dir / "adapters"
    old, again, newest = (_own(adapter_dir, n) for n in ("policy-v1", "policy-v1.2", "policy-v3"))
    server = StandInServer({"policy-v1": str(old), "policy-v2": str(again), "policy-v3": str(newest)})
    _evict_twice(ServerAdapters(server, adapter_dir, keep_last=1))
    assert not old.exists() and not again.exists() and newest.is_dir()
