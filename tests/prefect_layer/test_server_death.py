"""A vLLM server that dies mid-run is named, with its log, instead of surfacing
as a bare connection error from deep inside the client.

The stand-in server is a real process whose command line says vllm (what
`VLLMServer.alive` checks); its death is a real SIGKILL."""

import signal
import subprocess
import sys

import httpx
import pytest

from ludic_core.inference.errors import InferenceServerError
from tasks.inference import death_notice, watch_server


@pytest.fixture
def server(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text("INFO engine started\nERROR CUDA out of memory\n")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "vllm-stand-in"])
    info = {"pid": proc.pid, "host": "127.0.0.1", "port": 1, "base_url": "http://127.0.0.1:1/v1",
            "log_path": str(log), "model": "policy", "build": "cpu"}
    yield proc, info
    proc.kill()
    proc.wait()


def test_a_live_server_lets_the_error_through(server):
    proc, info = server
    assert death_notice(info) is None
    with pytest.raises(httpx.ConnectError):
        with watch_server(info):
            raise httpx.ConnectError("refused")


def test_a_dead_server_is_named_with_its_log(server):
    proc, info = server
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    with pytest.raises(InferenceServerError) as caught:
        with watch_server(info):
            raise httpx.ConnectError("refused")
    msg = str(caught.value)
    assert f"the vLLM server (pid {proc.pid}, http://127.0.0.1:1/v1) exited while the run was using it" in msg
    assert "ERROR CUDA out of memory" in msg and str(info["log_path"]) in msg
    assert isinstance(caught.value.__cause__, httpx.ConnectError)
