"""VLLMChatClient against a real vLLM server (the CPU build here), started once
per session by the `vllm_server` fixture through `ludic serve`."""

from __future__ import annotations

import asyncio
import os
import signal

import httpx
import pytest

from ludic_core.inference import ChatCompletionRequest, InferenceServerError, LocalChatClient, SamplingConfig
from ludic_core.vllm.client import VLLMChatClient
from ludic_core.vllm.http import RetryPolicy

pytestmark = pytest.mark.vllm

TOOLS = ({"type": "function", "function": {"name": "add", "description": "add two ints",
                                           "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}},)


@pytest.fixture(scope="module")
def client(vllm_server):
    return VLLMChatClient(vllm_server.base_url, api_key=vllm_server.api_key)


def _req(text: str, **sampling) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[{"role": "user", "content": text}], sampling=SamplingConfig(**sampling))


def _gather(client, reqs):
    async def run():
        return await asyncio.gather(*[client.complete(r) for r in reqs])

    return asyncio.run(run())


@pytest.mark.parametrize("temperature, top_p", [(1.0, 1.0), (0.7, 1.0), (1.0, 0.8), (0.0, 1.0)])
def test_logprobs_match_a_teacher_forced_forward_pass(client, tiny_model_and_tokenizer, teacher_logprobs,
                                                      temperature, top_p):
    model, _ = tiny_model_and_tokenizer
    reqs = [_req(f"prompt {i}", temperature=temperature, top_p=top_p, max_tokens=24, seed=i) for i in range(8)]
    worst = 0.0
    for resp, info in _gather(client, reqs):
        assert len(resp.completion_token_ids) == len(resp.completion_logprobs) > 0
        assert resp.policy_version is not None and info["weight_version"] is not None
        ref = teacher_logprobs(model, resp, temperature, top_p)
        worst = max(worst, max(abs(a - b) for a, b in zip(ref, resp.completion_logprobs)))
    print(f"\nmax |vLLM - teacher-forced| log-prob, T={temperature} top_p={top_p}: {worst:.2e}")
    assert worst < 1e-4, worst


def test_prompt_token_ids_equal_the_local_clients_including_tools(client, tiny_model_dir):
    local = LocalChatClient(tiny_model_dir)
    req = ChatCompletionRequest(messages=[{"role": "system", "content": "be brief"},
                                          {"role": "user", "content": "add 2 and 3"}],
                                tools=TOOLS, sampling=SamplingConfig(max_tokens=4, seed=0))
    resp, _ = asyncio.run(client.complete(req))
    assert resp.prompt_token_ids == local.encode_prompt(req)


def test_seeded_sampling_reproduces(client):
    a, _ = asyncio.run(client.complete(_req("seeded", max_tokens=16, seed=42)))
    b, _ = asyncio.run(client.complete(_req("seeded", max_tokens=16, seed=42)))
    c, _ = asyncio.run(client.complete(_req("seeded", max_tokens=16, seed=43)))
    assert a.completion_token_ids == b.completion_token_ids != c.completion_token_ids


def test_the_official_openai_client_works_unmodified(vllm_server):
    import openai

    oai = openai.OpenAI(base_url=vllm_server.base_url, api_key=vllm_server.api_key)
    assert "policy" in [m.id for m in oai.models.list()]
    out = oai.chat.completions.create(model="policy", messages=[{"role": "user", "content": "hi"}], max_tokens=8,
                                      temperature=0.8, seed=1, logprobs=True, extra_body={"return_token_ids": True})
    choice = out.choices[0]
    assert len(choice.logprobs.content) == len(choice.token_ids) == 8
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=vllm_server.base_url, api_key="wrong", max_retries=0).models.list()


def test_every_route_needs_the_api_key_except_health(vllm_server):
    root = vllm_server.root_url
    assert httpx.get(f"{root}/health").status_code == 200
    for method, path in [("POST", "/v1/chat/completions"), ("POST", "/pause"), ("POST", "/collective_rpc"),
                         ("POST", "/update_weights"), ("GET", "/weight_info"), ("POST", "/start_weight_update")]:
        assert httpx.request(method, f"{root}{path}", json={}).status_code == 401, path
    paused = httpx.get(f"{root}/is_paused", headers={"Authorization": f"Bearer {vllm_server.api_key}"}).json()
    assert paused == {"is_paused": False}  # the refused /pause did nothing


def test_the_cpu_workers_spin_window_is_ludics(vllm_server):
    """`ludic serve` on the CPU build shortens the worker's spin after each message from vLLM's 1 s
    to `VLLMServerConfig.worker_spin_s` (benchmarks/inference_server.py measures what it buys)."""
    from ludic_core.vllm.server import VLLMServerConfig

    out = httpx.post(f"{vllm_server.root_url}/collective_rpc", json={"method": "ludic_spin_window"},
                     headers={"Authorization": f"Bearer {vllm_server.api_key}"}, timeout=30).json()
    assert [float(r) for r in out["results"]] == [VLLMServerConfig().worker_spin_s], out


@pytest.mark.slow
@pytest.mark.heavy  # 40-50 s on a 2-core host, most of it its own server's start; .ci/run runs it
def test_a_server_whose_owner_dies_ends_and_clients_get_a_clear_error(tiny_model_dir, tmp_path):
    """Its own server, started by a process that is then SIGKILLed (as a cancelled or
    crashed flow run dies): the server and its engine processes go too, instead of holding
    the port for ever, and a client or publisher still pointed at it gets a clear error."""
    import socket
    import subprocess
    import sys
    import time

    from ludic_core.vllm.publisher import VLLMPolicyPublisher
    from tests.procs import group_members

    owner = subprocess.Popen([sys.executable, "-c", (
        "import time\n"
        "from ludic_core.vllm.server import VLLMServerConfig, start_vllm_server\n"
        f"server, key = start_vllm_server({str(tiny_model_dir)!r}, VLLMServerConfig(log_dir={str(tmp_path)!r}))\n"
        "print(server.pid, server.port, server.root_url, key, flush=True)\n"
        "time.sleep(600)\n")], stdout=subprocess.PIPE, text=True)
    try:
        line = owner.stdout.readline()
        assert line, "the server did not start"
        pid, port, root_url, key = line.split()
        pid, port = int(pid), int(port)
        assert group_members(pid)
        client = VLLMChatClient(f"{root_url}/v1", api_key=key, retry=RetryPolicy(max_retries=2, backoff_s=0.1))
        resp, _ = asyncio.run(client.complete(_req("alive", max_tokens=4, seed=0)))
        assert len(resp.completion_token_ids) == 4
        owner.send_signal(signal.SIGKILL)
        owner.wait()
        deadline = time.monotonic() + 60
        while group_members(pid):
            assert time.monotonic() < deadline, f"vLLM processes {group_members(pid)} outlived their owner"
            time.sleep(0.5)
    finally:
        owner.kill()
        owner.wait()
    with socket.socket() as s:  # the port is free again: nothing listens on it (TIME_WAIT
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # from health checks may remain)
        s.bind(("127.0.0.1", port))
    with pytest.raises(ConnectionRefusedError), socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    assert not os.path.exists(f"/proc/{pid}") or b"Z" in open(f"/proc/{pid}/stat", "rb").read().split(b")")[-1][:3]
    with pytest.raises(InferenceServerError, match=rf"{root_url}/\S+ is unreachable after 3 attempt"):
        asyncio.run(client.complete(_req("dead", max_tokens=4, seed=0)))
    publisher = VLLMPolicyPublisher(root_url, api_key=key)
    publisher.control.retry = RetryPolicy(max_retries=1, backoff_s=0.1)
    with pytest.raises(InferenceServerError, match="unreachable"):
        publisher.publish({}, version=1)
