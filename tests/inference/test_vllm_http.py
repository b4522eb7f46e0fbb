"""VLLMChatClient and the control client against stand-ins: retries, errors,
version bracketing, request and response shapes. The real server is tested in
test_vllm_live.py; these pin the client's own logic."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from ludic_core.inference import ChatCompletionRequest, ContextLengthError, InferenceServerError, SamplingConfig
from ludic_core.inference.chat_render import ChatRenderError, chat_prompt_ids
from ludic_core.models.tiny import build_byte_tokenizer
from ludic_core.vllm.client import VLLMChatClient, parse_version
from ludic_core.vllm.http import ControlClient, RetryPolicy

FAST = RetryPolicy(max_retries=2, backoff_s=0.05, max_backoff_s=0.1)


TOKENIZER = build_byte_tokenizer()
PROMPT_X = chat_prompt_ids(TOKENIZER, [{"role": "user", "content": "x"}])  # what _req() renders to


def _completion(version_note: str = "") -> dict:
    """/v1/completions' answer (vLLM's shape with return_token_ids and logprobs=0)."""
    return {"choices": [{"text": "hi" + version_note, "token_ids": [7, 8], "finish_reason": "stop",
                         "logprobs": {"token_logprobs": [-0.5, -1.25]}}]}


def _client(url: str, **kw) -> VLLMChatClient:
    """A client given the tokenizer it renders prompts with (else it asks /v1/models)."""
    return VLLMChatClient(url, tokenizer=TOKENIZER, **kw)


class StandIn:
    """A scripted HTTP server: each path answers from a queue of (status, body)."""

    def __init__(self) -> None:
        self.script: dict[str, list[tuple[int, dict]]] = {}
        self.seen: list[tuple[str, str, dict | None, str | None]] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                path = self.path.split("?")[0]
                outer.seen.append((self.command, path, body, self.headers.get("authorization")))
                queue = outer.script.get(path) or [(404, {"error": "no such route"})]
                status, payload = queue.pop(0) if len(queue) > 1 else queue[0]
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def stand_in():
    s = StandIn()
    yield s
    s.close()


def _refusing_url() -> str:
    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _req(**sampling) -> ChatCompletionRequest:
    return ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], sampling=SamplingConfig(**sampling))


def test_gone_server_is_a_clear_error_after_bounded_backoff():
    url = _refusing_url()
    client = _client(f"{url}/v1", retry=FAST)
    start = time.monotonic()
    with pytest.raises(InferenceServerError, match=rf"{url}/weight_info is unreachable after 3 attempt"):
        asyncio.run(client.complete(_req()))
    assert 0.1 <= time.monotonic() - start < 5  # backed off 0.05 + 0.1, then gave up
    assert client.stats["transport_retries"] == 2
    with pytest.raises(InferenceServerError, match=rf"{url}/pause is unreachable after 3 attempt"):
        ControlClient(url, retry=FAST).post("/pause")


def test_request_body_and_response_mapping(stand_in):
    stand_in.script = {"/weight_info": [(200, {"weight_version": "7"})], "/v1/completions": [(200, _completion())]}
    client = _client(f"{stand_in.url}/v1", api_key="k", model="m")
    tools = ({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}},)
    req = ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], tools=tools,
                                sampling=SamplingConfig(temperature=0.5, top_p=0.9, max_tokens=9, stop=["</a>"], seed=3))
    resp, info = asyncio.run(client.complete(req))
    prompt = chat_prompt_ids(TOKENIZER, [{"role": "user", "content": "x"}], tools=tools)
    assert (resp.text, resp.prompt_token_ids, resp.completion_token_ids) == ("hi", prompt, [7, 8])
    assert resp.completion_logprobs == [-0.5, -1.25] and resp.policy_version == 7 and resp.finish_reason == "stop"
    assert info["weight_version"] == "7" and info["backend"] == "vllm"
    (_, _, body, auth), = [s for s in stand_in.seen if s[1] == "/v1/completions"]
    assert auth == "Bearer k"
    assert body == {"model": "m", "prompt": prompt, "max_tokens": 9,  # the tools are in the prompt
                    "temperature": 0.5, "top_p": 0.9, "logprobs": 0, "return_token_ids": True,
                    "skip_special_tokens": True, "stop": ["</a>"], "seed": 3}


def test_the_served_bases_tokenizer_is_found_or_the_request_refused(stand_in, tiny_model_dir):
    """Without a tokenizer the client loads the one /v1/models names as the base's root;
    with none there it refuses rather than letting the server's chat route render."""
    stand_in.script = {"/weight_info": [(200, {"weight_version": "default"})], "/v1/completions": [(200, _completion())],
                       "/v1/models": [(200, {"data": [{"id": "policy", "root": str(tiny_model_dir), "parent": None}]})]}
    client = VLLMChatClient(f"{stand_in.url}/v1")
    resp, _ = asyncio.run(client.complete(_req()))
    assert resp.prompt_token_ids == PROMPT_X and resp.policy_version == 0  # "default": the weights it started with
    stand_in.script["/v1/models"] = [(200, {"data": [{"id": "policy", "root": "/nonexistent/model", "parent": None}]})]
    with pytest.raises(ChatRenderError, match="tokenizer="):
        asyncio.run(VLLMChatClient(f"{stand_in.url}/v1").complete(_req()))


def test_a_server_that_reports_another_prompt_is_an_error(stand_in):
    data = _completion()
    data["choices"][0]["prompt_token_ids"] = [1, 2, 3]
    stand_in.script = {"/weight_info": [(200, {"weight_version": "1"})], "/v1/completions": [(200, data)]}
    with pytest.raises(InferenceServerError, match="prompt of 3 ids"):
        asyncio.run(_client(f"{stand_in.url}/v1").complete(_req()))


def test_unavailable_is_retried_then_answered(stand_in):
    stand_in.script = {"/weight_info": [(200, {"weight_version": "1"})],
                       "/v1/completions": [(503, {"error": "starting"}), (200, _completion())]}
    resp, _ = asyncio.run(_client(f"{stand_in.url}/v1", retry=FAST).complete(_req()))
    assert resp.text == "hi"


def test_http_errors_are_named(stand_in):
    stand_in.script = {"/weight_info": [(401, {"error": "Unauthorized"})]}
    with pytest.raises(InferenceServerError, match="401 Unauthorized.*API key"):
        asyncio.run(_client(f"{stand_in.url}/v1").complete(_req()))
    stand_in.script = {"/weight_info": [(200, {"weight_version": "1"})], "/v1/completions": [
        (400, {"error": {"message": "This model's maximum context length is 1024 tokens. However, "
                                    "you requested 2000 tokens (context length exceeded)"}})]}
    with pytest.raises(ContextLengthError, match="maximum context length is 1024"):
        asyncio.run(_client(f"{stand_in.url}/v1").complete(_req()))
    stand_in.script = {"/pause": [(500, {"error": "engine dead"})]}
    with pytest.raises(InferenceServerError, match=r"/pause answered 500: engine dead"):
        ControlClient(stand_in.url).post("/pause")


def test_a_failed_version_read_is_not_reused(stand_in):
    """The first read fails (server down or refusing); once the server answers,
    the same client must ask again instead of re-raising the old error."""
    stand_in.script = {"/weight_info": [(500, {"error": "starting"})] * 2 + [(200, {"weight_version": "2"})],
                       "/v1/completions": [(200, _completion())]}
    client = _client(f"{stand_in.url}/v1")

    async def until_up():
        for _ in range(2):
            with pytest.raises(InferenceServerError, match="answered 500"):
                await client.complete(_req())
        return await client.complete(_req())

    resp, _ = asyncio.run(until_up())
    assert resp.policy_version == 2


def test_a_completion_that_straddles_a_push_is_sent_again(stand_in):
    # before: "4"; the push lands while the first request runs (after: "5");
    # the re-sent request sees "5" on both sides and is reported as version 5.
    stand_in.script = {"/weight_info": [(200, {"weight_version": "4"}), (200, {"weight_version": "5"})],
                       "/v1/completions": [(200, _completion())]}
    client = _client(f"{stand_in.url}/v1")
    resp, info = asyncio.run(client.complete(_req()))
    assert resp.policy_version == 5 and info["attempts"] == 2 and client.stats["version_retries"] == 1
    assert sum(1 for s in stand_in.seen if s[1] == "/v1/completions") == 2


def test_concurrent_completions_share_version_reads(stand_in):
    stand_in.script = {"/weight_info": [(200, {"weight_version": "3"})], "/v1/completions": [(200, _completion())]}
    client = _client(f"{stand_in.url}/v1")

    async def run():
        return await asyncio.gather(*[client.complete(_req()) for _ in range(32)])

    results = asyncio.run(run())
    assert {r.policy_version for r, _ in results} == {3}
    reads = sum(1 for s in stand_in.seen if s[1] == "/weight_info")
    assert reads < 32, reads  # reads that start after a response are shared by everyone waiting


def test_base_url_and_version_parsing():
    with pytest.raises(ValueError, match="ending in /v1"):
        VLLMChatClient("http://127.0.0.1:8000")
    assert (parse_version("default"), parse_version("12"), parse_version("abc")) == (0, 12, None)


def test_sync_weights_pushes_through_the_publisher_its_owner_gave_it():
    """Inference never imports publish: the client is handed its `WeightPusher`."""
    client = VLLMChatClient("http://127.0.0.1:9/v1")
    with pytest.raises(RuntimeError, match="publisher"):
        client.sync_weights({}, version=1)
    pushed = []

    class Recorder:
        def publish(self, state_dict, *, version):
            pushed.append((dict(state_dict), version))

    client.publisher = Recorder()
    assert client.sync_weights({"w": 1}, version=3) == 3 and pushed == [({"w": 1}, 3)]


def test_the_tokenizer_comes_from_the_base_behind_an_adapter():
    """An adapter's /v1/models root is its adapter directory (no tokenizer): follow `parent` to the base."""
    from ludic_core.vllm.client import _base_root

    entries = [{"id": "policy", "root": "/models/base", "parent": None},
               {"id": "policy-v3", "root": "/adapters/policy-v3", "parent": "policy"}]
    assert _base_root(entries, "policy-v3") == "/models/base"
    assert _base_root(entries, "policy") == "/models/base"
    assert _base_root(entries, "gone") == "/models/base"  # not served: the first base
    assert _base_root([], "policy") is None
    loop = [{"id": "a", "root": "/a", "parent": "b"}, {"id": "b", "root": "/b", "parent": "a"}]
    assert _base_root(loop, "a") in ("/a", "/b")  # a malformed parent cycle ends, it does not hang
