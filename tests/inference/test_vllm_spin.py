"""The vLLM worker's spin window (ludic_vllm_ext.shorten_idle_spin) against a stand-in of vLLM's
queue class, and the launcher's environment for it. The live server's window:
test_vllm_live.py; what it buys: benchmarks/inference_server.py."""

from __future__ import annotations

import importlib.util
import logging
import sys
import types

import pytest

from ludic_core.vllm.plugin import SPIN_ENV
from ludic_core.vllm.plugin import ludic_vllm_ext as ext
from ludic_core.vllm.server import VLLMServerConfig, build_command

MODULE = "vllm.distributed.device_communicators.shm_broadcast"


def _fake_vllm(monkeypatch, cls) -> None:
    """vLLM's module path with `cls` as its SpinCondition (only this module is looked up)."""
    parts = MODULE.split(".")
    for i in range(1, len(parts) + 1):
        monkeypatch.setitem(sys.modules, ".".join(parts[:i]), types.ModuleType(".".join(parts[:i])))
    sys.modules[MODULE].SpinCondition = cls


def test_the_spin_window_becomes_the_readers_default(monkeypatch):
    class SpinCondition:  # vLLM 0.32's signature
        def __init__(self, is_reader, context, notify_address, busy_loop_s: float = 1):
            self.busy_loop_s = busy_loop_s if is_reader else 0

    _fake_vllm(monkeypatch, SpinCondition)
    assert ext.spin_window() == 1.0
    assert ext.shorten_idle_spin(None) is False and SpinCondition(True, None, "x").busy_loop_s == 1
    assert ext.shorten_idle_spin(0.05) is True
    assert SpinCondition(True, None, "x").busy_loop_s == 0.05 and ext.spin_window() == 0.05
    assert SpinCondition(True, None, "x", 2.0).busy_loop_s == 2.0  # an explicit window is vLLM's to keep


def test_a_vllm_without_the_window_is_left_alone_and_says_so(monkeypatch, caplog):
    class SpinCondition:  # another signature: nothing to set
        def __init__(self, is_reader, context, notify_address, *, poll_ms: int = 10):
            self.poll_ms = poll_ms

    _fake_vllm(monkeypatch, SpinCondition)
    with caplog.at_level(logging.WARNING, logger="ludic_vllm_ext"):
        assert ext.shorten_idle_spin(0.05) is False
    assert "left as is" in caplog.text and ext.spin_window() is None
    assert SpinCondition(True, None, "x").poll_ms == 10


@pytest.mark.parametrize("build, spin, want", [("cpu", 0.05, "0.05"), ("cpu", None, None), ("cuda", 0.05, None)])
def test_the_launcher_sets_the_window_on_the_cpu_build_only(build, spin, want):
    _, env = build_command("/m", VLLMServerConfig(worker_spin_s=spin), python="/py", port=1, build=build)
    assert env.get(SPIN_ENV) == want


def test_the_env_names_agree():
    assert ext.SPIN_ENV == SPIN_ENV  # the extension runs without ludic_core, so it names it itself


@pytest.mark.parametrize("name, window", [("ludic_vllm_ext", 0.05), ("ludic_core.vllm.plugin.ludic_vllm_ext", 1.0)])
def test_the_env_sets_the_window_only_in_the_server(monkeypatch, caplog, name, window):
    """The server loads the file as `ludic_vllm_ext` and takes the env's window; the trainer imports
    it through ludic_core (its wire types), where an exported variable must change nothing."""
    class SpinCondition:
        def __init__(self, is_reader, context, notify_address, busy_loop_s: float = 1):
            self.busy_loop_s = busy_loop_s

    _fake_vllm(monkeypatch, SpinCondition)
    monkeypatch.setenv(SPIN_ENV, "0.05")
    spec = importlib.util.spec_from_file_location(name, ext.__file__)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    with caplog.at_level(logging.WARNING, logger="ludic_vllm_ext"):
        spec.loader.exec_module(module)
    assert SpinCondition(True, None, "x").busy_loop_s == window and not caplog.text
