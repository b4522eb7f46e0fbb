"""The vLLM launcher's pure parts: the command it builds, config checks, and
stopping a process group by PID (a real server is started in test_vllm_live)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from ludic_core.vllm.plugin import PLUGIN_DIR
from ludic_core.vllm.server import VLLMServerConfig, build_command, pid_alive, stop_server_pid


def _flag(cmd: list[str], name: str) -> str:
    return cmd[cmd.index(name) + 1]


def test_cpu_command_has_what_ludic_relies_on_and_no_secret():
    cmd, env = build_command("/models/m", VLLMServerConfig(), python="/venv/bin/python", port=8123, build="cpu")
    assert cmd[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert (_flag(cmd, "--host"), _flag(cmd, "--port"), _flag(cmd, "--model")) == ("127.0.0.1", "8123", "/models/m")
    assert _flag(cmd, "--logprobs-mode") == "processed_logprobs"  # the sampled distribution's log-probs
    assert _flag(cmd, "--generation-config") == "vllm"
    assert json.loads(_flag(cmd, "--weight-transfer-config")) == {"backend": "ludic_gloo"}
    assert _flag(cmd, "--worker-extension-cls") == "ludic_vllm_ext.LudicWorkerExtension"
    assert _flag(cmd, "--middleware") == "ludic_vllm_auth.require_api_key"
    assert "--enforce-eager" in cmd and "--api-key" not in cmd  # the key travels in VLLM_API_KEY
    assert env == {"VLLM_SERVER_DEV_MODE": "1", "PYTHONPATH": str(PLUGIN_DIR), "VLLM_CPU_KVCACHE_SPACE": "1",
                   "LUDIC_VLLM_SPIN_S": "0.05"}


def test_cuda_command_uses_vllms_nccl_engine():
    cfg = VLLMServerConfig(host="0.0.0.0", tool_call_parser=None, enforce_eager=False, extra_args=("--seed", "1"))
    cmd, env = build_command("/m", cfg, python="p", port=1, build="cuda")
    assert json.loads(_flag(cmd, "--weight-transfer-config")) == {"backend": "nccl"}
    assert "--enable-auto-tool-choice" not in cmd and "--enforce-eager" not in cmd and cmd[-2:] == ["--seed", "1"]
    assert "VLLM_CPU_KVCACHE_SPACE" not in env


def test_config_is_strict():
    with pytest.raises(ValidationError, match="kv_cache_gb"):
        VLLMServerConfig(kv_cache_gb=2)
    with pytest.raises(ValidationError, match="port"):
        VLLMServerConfig(port=70000)


def test_missing_environment_is_a_clear_error(tmp_path, tiny_model_dir):
    from ludic_core.vllm.server import start_vllm_server

    with pytest.raises(FileNotFoundError, match="ludic serve --setup"):
        start_vllm_server(tiny_model_dir, VLLMServerConfig(python=str(tmp_path / "nope" / "python")))
    with pytest.raises(FileNotFoundError, match="not a model directory"):
        start_vllm_server(tmp_path, VLLMServerConfig())


def test_stop_ends_the_whole_process_group():
    # a group leader with a child, like the API server and its engine-core process
    code = "import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
           "print(flush=True); time.sleep(60)  # vllm stand-in"
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    leader.stdout.readline()
    child = int(subprocess.check_output(["pgrep", "-P", str(leader.pid)]).split()[0])
    assert stop_server_pid(leader.pid, timeout_s=5)
    leader.wait(timeout=5)
    deadline = time.time() + 5
    while pid_alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child)
    assert not stop_server_pid(leader.pid)  # already gone: nothing to do


def test_stop_reaches_children_that_outlive_a_reaped_leader():
    # the API server died (and was reaped) but its engine-core child still runs in its group
    code = "import subprocess, sys; p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)']); " \
           "print(p.pid, flush=True)  # vllm stand-in"
    leader = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, start_new_session=True)
    child = int(leader.stdout.readline())
    leader.wait(timeout=5)
    assert pid_alive(child)
    assert not stop_server_pid(leader.pid, timeout_s=5)  # the server itself was not running...
    deadline = time.time() + 5
    while pid_alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not pid_alive(child)  # ...but its straggler is gone


def test_a_busy_server_is_not_declared_dead_after_one_slow_probe():
    """ensure_server restarts a server that is not `responsive()`: a live one that
    misses one probe (busy decoding) must survive; a dead PID must not wait at all."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from ludic_core.vllm.server import VLLMServer

    calls: list[float] = []

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            calls.append(time.monotonic())
            if len(calls) == 1:
                time.sleep(1.0)  # the first probe times out
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        busy = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)  # vllm stand-in"])
        deadline = time.monotonic() + 30  # until the child has exec'd, /proc shows the parent's command line
        while b"vllm stand-in" not in open(f"/proc/{busy.pid}/cmdline", "rb").read():
            assert time.monotonic() < deadline, "the stand-in never started"
            time.sleep(0.01)
        live = VLLMServer(busy.pid, "127.0.0.1", srv.server_address[1], "log", "policy", "cpu")
        assert not live.healthy(timeout_s=0.3)  # one short probe would have called it dead
        assert live.responsive(tries=3, timeout_s=2.0, pause_s=0.05)  # generous: CI hosts run loaded
        assert len(calls) >= 2
        dead = subprocess.Popen([sys.executable, "-c", "pass"])
        dead.wait()
        gone = VLLMServer(dead.pid, "127.0.0.1", srv.server_address[1], "log", "policy", "cpu")
        t = time.monotonic()
        assert not gone.responsive(tries=3, timeout_s=5.0, pause_s=1.0)
        assert time.monotonic() - t < 0.5
    finally:
        srv.shutdown()
        busy.kill()
        busy.wait()


def test_a_reused_pid_is_never_signalled():
    """The saved PID of a server that died long ago may now be someone else's."""
    from ludic_core.vllm.server import VLLMServer

    other = subprocess.Popen(["sleep", "60"], start_new_session=True)  # a group leader, like a server
    try:
        assert not VLLMServer(other.pid, "127.0.0.1", 9, "log", "policy", "cpu").alive()
        assert not stop_server_pid(other.pid, timeout_s=1)
        assert other.poll() is None  # left alone
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize(("rank", "served"), [(1, 1), (2, 8), (8, 8), (9, 16), (16, 16), (33, 64), (300, 320),
                                              (321, 512), (512, 512)])
def test_lora_ranks_round_up_to_one_vllm_accepts(rank, served):
    from ludic_core.vllm.server import served_lora_rank

    assert served_lora_rank(rank) == served


def test_lora_serving_flags_and_the_runtime_update_switch():
    cfg = VLLMServerConfig(max_lora_rank=12, max_loras=3, max_cpu_loras=4)
    cmd, env = build_command("/m", cfg, python="p", port=1, build="cpu")
    assert "--enable-lora" in cmd
    assert (_flag(cmd, "--max-lora-rank"), _flag(cmd, "--max-loras"), _flag(cmd, "--max-cpu-loras")) == ("16", "3", "4")
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"  # /v1/load_lora_adapter and /v1/unload_lora_adapter
    plain, plain_env = build_command("/m", VLLMServerConfig(), python="p", port=1, build="cpu")
    assert not any("lora" in arg for arg in plain) and "VLLM_ALLOW_RUNTIME_LORA_UPDATING" not in plain_env
    default_cpu, _ = build_command("/m", VLLMServerConfig(max_lora_rank=8), python="p", port=1, build="cpu")
    assert "--max-cpu-loras" not in default_cpu and _flag(default_cpu, "--max-loras") == "2"


def test_lora_settings_that_vllm_would_refuse_are_refused_naming_them():
    with pytest.raises(ValidationError, match=r"LoRA rank 600 is above the largest vLLM serves \(512\)"):
        VLLMServerConfig(max_lora_rank=600)
    with pytest.raises(ValidationError, match=r"max_cpu_loras \(1\) must be >= max_loras \(2\)"):
        VLLMServerConfig(max_lora_rank=8, max_cpu_loras=1)
    with pytest.raises(ValidationError, match="max_lora_rank"):
        VLLMServerConfig(max_lora_rank=0)
