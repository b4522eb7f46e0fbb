"""`VLLMChatClient`: the `ChatClient` seam over a vLLM server's OpenAI API.

Each completion asks vLLM for what the trainer needs: prompt and completion
token ids (`return_token_ids`) and the chosen tokens' log-probs (`logprobs`),
which the launcher's `--logprobs-mode processed_logprobs` makes the log-probs
of the distribution actually sampled from, as `LocalChatClient` reports them.

Which weights produced a completion: the OpenAI response does not say, so the
client brackets each request with the server's weight version (GET
/weight_info, one read shared by all requests that finish together). A
publish pauses the server with mode=wait and sets the new version before it
resumes, so equal versions before and after mean the whole completion came
from that version. If they differ a push finished meanwhile and the
completion is sent again (rare: pushes are seconds apart, requests short).

A LoRA run serves each policy version as an adapter named `policy-vN` over
the unchanged base (`vllm.adapters`). A request names the adapter,
so its completion came from version N: no bracketing is needed. The
publisher tells the client the newest name (`note_published(version,
model=...)`); a client in another process (a pipeline actor) follows it with
`follow_newest_adapter()`. A model the server does not serve (a typo, an
adapter already unloaded) is an `UnknownServedModelError` listing what is.

Prompts are rendered here, not by the server: vLLM's /v1/chat/completions renders
the template to text and tokenizes it whole, so a reply or observation spelling
`<|im_end|><|im_start|>system` would become real role markers. The client renders
the ids with `chat_render` (message text stays text) and sends them to
/v1/completions. The tokenizer is the one given, else the served base's (the
directory /v1/models names as its `root`, read on the first request). Tool calls
come back as text, which agents parse (`agents.tools`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any, Mapping

import httpx

from ludic_core.inference.chat_render import ChatRenderError, chat_prompt_ids
from ludic_core.inference.client import WeightPusher
from ludic_core.inference.errors import ContextLengthError, InferenceServerError, UnknownServedModelError
from ludic_core.inference.sampling import ChatCompletionRequest
from ludic_core.lora.names import adapter_version
from ludic_core.types import ChatResponse
from ludic_core.vllm.http import (
    RETRYABLE_STATUS,
    RetryPolicy,
    auth_headers,
    check_response,
    gone_error,
)

__all__ = ["VLLMChatClient", "newest_adapter", "parse_version"]

log = logging.getLogger(__name__)


def parse_version(value: Any) -> int | None:
    """vLLM's weight version string as ludic's int: "default" (never pushed) is 0."""
    text = str(value)
    if text == "default":
        return 0
    return int(text) if text.lstrip("-").isdigit() else None


def newest_adapter(served: list[str]) -> str | None:
    """The versioned adapter (`policy-vN`) of the highest version among `served`, None without one."""
    versioned = [(v, name) for name in served if (v := adapter_version(name)) is not None]
    return max(versioned)[1] if versioned else None


class VLLMChatClient:
    """`ChatClient` for a vLLM server; `base_url` ends in /v1.

    `model` is the base's served name; `self.model` is what requests that name
    no model get (the newest published adapter, once one is).
    """

    def __init__(
        self,
        base_url: str,
        *,
        model: str = "policy",
        api_key: str | None = None,
        timeout_s: float = 120.0,
        retry: RetryPolicy = RetryPolicy(),
        max_connections: int = 64,
        max_version_retries: int = 3,
        extra_body: Mapping[str, Any] | None = None,
        tokenizer: Any = None,
    ) -> None:
        base_url = base_url.rstrip("/")
        if not base_url.endswith("/v1"):
            raise ValueError(f"base_url must be the OpenAI API root ending in /v1, got {base_url!r}")
        self.base_url, self.root_url = base_url, base_url[: -len("/v1")]
        self.base_model = self.model = model
        self.retry = retry
        self.max_version_retries = max_version_retries
        self.extra_body = dict(extra_body or {})  # more vLLM sampling fields, e.g. {"top_k": 20}
        #: renders prompts: a tokenizer, its directory, or None for the served base's (/v1/models root)
        self.tokenizer: Any = tokenizer
        self._api_key, self._timeout_s, self._max_conn = api_key, timeout_s, max_connections
        self._http: httpx.AsyncClient | None = None
        self._http_loop: asyncio.AbstractEventLoop | None = None
        self._known_version: str | None = None
        self._version_read: _VersionRead | None = None
        self.version_read_delay_s = 0.005
        #: what `sync_weights` pushes through: a `WeightPusher` for this server (e.g.
        #: `VLLMPolicyPublisher(client.root_url, on_published=client.note_published)`), set by its owner
        self.publisher: WeightPusher | None = None
        self.stats = {"requests": 0, "version_retries": 0, "transport_retries": 0}

    # ---- ChatClient ----------------------------------------------------
    async def complete(self, request: ChatCompletionRequest) -> tuple[ChatResponse, dict[str, Any]]:
        try:
            return await self._complete(request)
        except UnknownServedModelError as exc:
            # The adapter this client followed was unloaded (a publisher elsewhere moved
            # on, keep_last behind): follow the newest and send the request once more.
            if request.model is not None or adapter_version(self.model) is None:
                raise
            newest = newest_adapter(list(exc.served))
            if newest is None or newest == exc.model:
                raise
            log.info("adapter %s is no longer served; following %s", exc.model, newest)
            self.model = newest
            return await self._complete(request)

    async def _complete(self, request: ChatCompletionRequest) -> tuple[ChatResponse, dict[str, Any]]:
        prompt = chat_prompt_ids(await self._prompt_tokenizer(), request.message_list(), tools=request.tools)
        body = self._body(request, prompt)
        adapter = adapter_version(body["model"])
        if adapter is not None:  # an adapter never changes under its name: it is the version
            sent = time.monotonic()
            data = await self._post_completion(body)
            self.stats["requests"] += 1
            info = {"backend": "vllm", "latency_s": time.monotonic() - sent, "weight_version": body["model"],
                    "attempts": 1}
            return self._to_response(request, prompt, data, adapter), info
        for attempt in range(self.max_version_retries + 1):
            before = self._known_version or await self._version_since(0.0)
            sent = time.monotonic()
            data = await self._post_completion(body)
            after = await self._version_since(time.monotonic())
            if before == after:
                self.stats["requests"] += 1
                info = {"backend": "vllm", "latency_s": time.monotonic() - sent, "weight_version": after,
                        "attempts": attempt + 1}
                return self._to_response(request, prompt, data, parse_version(after)), info
            self.stats["version_retries"] += 1
            log.debug("weights changed from %s to %s during a request; sending it again", before, after)
        raise InferenceServerError(f"{self.base_url}: the served weights changed during each of "
                                   f"{self.max_version_retries + 1} attempts of one request")

    def sync_weights(self, params: Mapping[str, Any], *, version: int) -> int:
        """Push `params` through `self.publisher` (vLLM's weight-transfer API, say)."""
        if self.publisher is None:
            raise RuntimeError(f"{self.base_url}: no publisher to push weights with; set client.publisher = "
                               "VLLMPolicyPublisher(client.root_url, api_key=..., on_published=client.note_published)")
        self.publisher.publish(params, version=version)
        return int(version)

    def note_published(self, version: int, *, model: str | None = None) -> None:
        """A publisher in this process finished a push. `model` None: full weights
        at `version` (skip one version read); else the adapter `model` now serves
        `version`, and requests that name no model get it from now on."""
        if model is None:
            self._known_version = str(int(version))
            self.model = self.base_model
        else:
            self.model = model

    async def served_models(self) -> list[str]:
        """Every name the server answers to (GET /v1/models): the base and its adapters."""
        return _model_ids(await self._request("GET", f"{self.base_url}/models"))

    def follow_newest_adapter(self) -> str:
        """Point requests that name no model at the newest adapter the server serves
        (the base when it serves none); returns that name. For a client whose
        publisher runs elsewhere: a pipeline actor calls it before each round."""
        with httpx.Client(headers=auth_headers(self._api_key), timeout=httpx.Timeout(self._timeout_s)) as http:
            served = _model_ids(check_response(http.get(f"{self.base_url}/models"), "GET /v1/models"))
        self.model = newest_adapter(served) or self.base_model
        return self.model

    # ---- HTTP ------------------------------------------------------------
    def _client(self) -> httpx.AsyncClient:
        loop = asyncio.get_running_loop()
        if self._http is None or self._http_loop is not loop:  # an httpx pool is bound to its loop
            self._http = httpx.AsyncClient(
                headers=auth_headers(self._api_key), timeout=httpx.Timeout(self._timeout_s, connect=5.0),
                limits=httpx.Limits(max_connections=self._max_conn, max_keepalive_connections=self._max_conn))
            self._http_loop = loop
            self._version_read = None
        return self._http

    async def _request(self, method: str, url: str, **kw: Any) -> Any:
        """Send with retries: completions and version reads have no side effects,
        so any transport failure may be retried (a read timeout may not: the
        server is alive but slow, and re-sending only adds load)."""
        for attempt in range(self.retry.max_retries + 1):
            try:
                resp = await self._client().request(method, url, **kw)
            except httpx.ReadTimeout as exc:
                raise InferenceServerError(f"{url}: no answer within {self._timeout_s:.0f} s") from exc
            except httpx.TransportError as exc:
                if attempt == self.retry.max_retries:
                    raise gone_error(url, exc, attempt + 1) from exc
                self.stats["transport_retries"] += 1
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if resp.status_code in RETRYABLE_STATUS and attempt < self.retry.max_retries:
                await asyncio.sleep(self.retry.delay(attempt))
                continue
            if resp.status_code == 400 and "context length" in resp.text:
                raise ContextLengthError(f"{url}: {resp.json().get('error', {}).get('message', resp.text)}")
            return check_response(resp, f"{method} {url}")
        raise AssertionError("unreachable")

    async def _prompt_tokenizer(self) -> Any:
        """The tokenizer prompts are rendered with; loaded once when given as a directory
        or not given (then the served base's directory, as /v1/models names it)."""
        if self.tokenizer is not None and not isinstance(self.tokenizer, (str, Path)):
            return self.tokenizer
        where = self.tokenizer
        if where is None:
            entries = (await self._request("GET", f"{self.base_url}/models") or {}).get("data", [])
            where = _base_root(entries, self.base_model)
        try:
            from transformers import AutoTokenizer

            self.tokenizer = AutoTokenizer.from_pretrained(str(where))
        except Exception as exc:  # any failure to load means: nothing to render with
            raise ChatRenderError(
                f"{self.base_url}: no tokenizer to render prompts with ({where!r}: {exc}); the server's chat route "
                "would turn marker text in messages into control tokens, so pass VLLMChatClient(tokenizer=...) "
                "(the served model's tokenizer or its directory)") from exc
        return self.tokenizer

    async def _post_completion(self, body: dict[str, Any]) -> dict[str, Any]:
        try:
            return await self._request("POST", f"{self.base_url}/completions", json=body)
        except InferenceServerError as exc:
            if "answered 404" not in str(exc) or "does not exist" not in str(exc):
                raise
            served = await self.served_models()
            if body["model"] in served:  # a 404 about something else
                raise
        hint = (" (an adapter older than the publisher's keep_last is unloaded)"
                if adapter_version(body["model"]) is not None else "")
        raise UnknownServedModelError(f"model {body['model']!r} is not served by {self.base_url}; it serves "
                                      f"{', '.join(served) or 'nothing'}{hint}", model=body["model"],
                                      served=tuple(served))

    async def _version_since(self, since: float) -> str:
        """The server's weight version from a read sent no earlier than `since`.

        A read waits a few milliseconds before it is sent, and every caller
        that arrives meanwhile shares it: 32 completions that finish together
        cost one /weight_info call, not 32. A read that failed is never reused:
        the next caller asks again (the server may be back).
        """
        read = self._version_read
        failed = read is not None and read.task.done() and read.task.exception() is not None
        if read is None or failed or (read.sent_at is not None and read.sent_at < since):
            read = self._version_read = _VersionRead(self, self.version_read_delay_s)
        data = await asyncio.shield(read.task)
        version = str(data["weight_version"])
        self._known_version = version
        return version

    # ---- conversion ----------------------------------------------------------
    def _body(self, request: ChatCompletionRequest, prompt: list[int]) -> dict[str, Any]:
        """A /v1/completions body; the tools are in the prompt the template rendered."""
        s = request.sampling
        body: dict[str, Any] = {
            "model": request.model or self.model, "prompt": prompt,
            "max_tokens": s.max_tokens, "temperature": s.temperature, "top_p": s.top_p,
            "logprobs": 0 if request.returns.return_logprobs else None,  # 0: the sampled token's only
            "return_token_ids": True, "skip_special_tokens": True,
        }
        if s.stop:
            body["stop"] = list(s.stop)
        if s.seed is not None:
            body["seed"] = s.seed
        return {**self.extra_body, **body}

    @staticmethod
    def _to_response(request: ChatCompletionRequest, prompt: list[int], data: dict[str, Any],
                     version: int | None) -> ChatResponse:
        choice = data["choices"][0]
        ids = list(choice.get("token_ids") or [])
        echoed = choice.get("prompt_token_ids") or data.get("prompt_token_ids")
        if echoed is not None and list(echoed) != prompt:
            raise InferenceServerError(f"server reports a prompt of {len(echoed)} ids, not the {len(prompt)} sent")
        logprobs = None
        if request.returns.return_logprobs and choice.get("logprobs"):
            logprobs = [float(lp) for lp in choice["logprobs"]["token_logprobs"]]
            if len(logprobs) != len(ids):
                raise InferenceServerError(f"server returned {len(logprobs)} log-probs for {len(ids)} tokens")
        want_ids = request.returns.return_token_ids
        return ChatResponse(
            text=choice.get("text") or "",
            prompt_token_ids=list(prompt) if want_ids else [],
            completion_token_ids=ids if want_ids else [],
            completion_logprobs=logprobs if want_ids else None,
            finish_reason=choice.get("finish_reason"),
            policy_version=version,
        )

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None


def _base_root(entries: list[dict[str, Any]], name: str | None) -> str | None:
    """The directory of the base model behind `name` in /v1/models' entries: an adapter's own
    root holds no tokenizer, so follow its `parent` to the base; else the first base served."""
    by_id = {m.get("id"): m for m in entries if isinstance(m, dict)}
    entry, seen = by_id.get(name), set()
    while entry is not None and entry.get("parent") in by_id and entry.get("id") not in seen:
        seen.add(entry.get("id"))
        entry = by_id[entry["parent"]]
    if entry is None:
        entry = next((m for m in by_id.values() if not m.get("parent")), None)
    return entry.get("root") if entry else None


def _model_ids(data: Any) -> list[str]:
    return [str(m["id"]) for m in (data or {}).get("data", [])]


class _VersionRead:
    """One shared GET /weight_info; `sent_at` is None until it is on its way."""

    def __init__(self, client: VLLMChatClient, delay_s: float) -> None:
        self.sent_at: float | None = None
        self.task = asyncio.ensure_future(self._run(client, delay_s))

    async def _run(self, client: VLLMChatClient, delay_s: float) -> Any:
        await asyncio.sleep(delay_s)
        self.sent_at = time.monotonic()
        return await client._request("GET", f"{client.root_url}/weight_info")
