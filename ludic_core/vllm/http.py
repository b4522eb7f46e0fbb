"""HTTP plumbing shared by the vLLM chat client and the weight publisher.

One policy for every call: authenticate with a bearer key; retry, with
exponential backoff, only failures where the request never reached the server
(connection refused / reset before sending, connect timeout) plus 502/503/504
from a proxy or a server still starting; never re-send a request the server
may have acted on. When the retries run out the error names the URL and says
the server is gone, instead of surfacing a bare socket error.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import httpx

from ludic_core.inference.errors import InferenceServerError

__all__ = ["RetryPolicy", "ControlClient", "check_response", "RETRYABLE_STATUS", "is_unreached"]

RETRYABLE_STATUS = frozenset({502, 503, 504})


@dataclass(frozen=True)
class RetryPolicy:
    max_retries: int = 3
    backoff_s: float = 0.5
    max_backoff_s: float = 4.0

    def delay(self, attempt: int) -> float:
        return min(self.max_backoff_s, self.backoff_s * (2 ** attempt))


def is_unreached(exc: BaseException) -> bool:
    """True when the request certainly did not reach the server."""
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout))


def gone_error(url: str, exc: BaseException, attempts: int) -> InferenceServerError:
    return InferenceServerError(
        f"inference server at {url} is unreachable after {attempts} attempt(s) "
        f"({type(exc).__name__}: {exc}); is it still running?")


def check_response(resp: httpx.Response, what: str) -> Any:
    """The JSON body of a 2xx response; else an error naming the URL and cause."""
    url = str(resp.request.url)
    if resp.status_code == 401:
        raise InferenceServerError(f"{what}: {url} refused the request (401 Unauthorized): "
                                   "missing or wrong API key")
    if resp.status_code >= 400:
        raise InferenceServerError(f"{what}: {url} answered {resp.status_code}: {_error_text(resp)}")
    if not resp.content:
        return None
    try:
        return resp.json()
    except ValueError:
        return resp.text


def _error_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        err = body.get("error", body.get("detail", body))
        if isinstance(err, dict):
            err = err.get("message", err)
        return str(err)[:1000]
    return str(body)[:1000]


def auth_headers(api_key: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


class ControlClient:
    """Synchronous calls to a vLLM server's control routes (/pause, /collective_rpc, ...)."""

    def __init__(self, root_url: str, *, api_key: str | None = None, timeout_s: float = 120.0,
                 retry: RetryPolicy = RetryPolicy()) -> None:
        self.root_url = root_url.rstrip("/")
        self.retry = retry
        # No keep-alive: the server closes idle connections (uvicorn: after 5 s), and a
        # control call sent on such a connection fails in a way that cannot tell
        # whether the server acted on it. A fresh loopback connection costs ~0.1 ms.
        self._http = httpx.Client(base_url=self.root_url, headers=auth_headers(api_key),
                                  timeout=httpx.Timeout(timeout_s, connect=5.0),
                                  limits=httpx.Limits(max_keepalive_connections=0))

    def call(self, method: str, path: str, *, json: Any = None, params: dict | None = None,
             timeout_s: float | None = None) -> Any:
        kwargs: dict[str, Any] = {"json": json, "params": params}
        if timeout_s is not None:
            kwargs["timeout"] = httpx.Timeout(timeout_s, connect=5.0)
        for attempt in range(self.retry.max_retries + 1):
            try:
                resp = self._http.request(method, path, **kwargs)
            except httpx.HTTPError as exc:
                if not is_unreached(exc):
                    raise InferenceServerError(f"{method} {self.root_url}{path} failed: "
                                               f"{type(exc).__name__}: {exc}") from exc
                if attempt == self.retry.max_retries:
                    raise gone_error(f"{self.root_url}{path}", exc, attempt + 1) from exc
                time.sleep(self.retry.delay(attempt))
                continue
            if resp.status_code in RETRYABLE_STATUS and attempt < self.retry.max_retries:
                time.sleep(self.retry.delay(attempt))
                continue
            return check_response(resp, f"{method} {path}")
        raise AssertionError("unreachable")

    def post(self, path: str, **kw: Any) -> Any:
        return self.call("POST", path, **kw)

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)

    def close(self) -> None:
        self._http.close()


async def async_sleep_backoff(retry: RetryPolicy, attempt: int) -> None:
    await asyncio.sleep(retry.delay(attempt))
