"""API-key guard for EVERY route of a vLLM server (`--middleware
ludic_vllm_auth.require_api_key`).

vLLM's own `--api-key` check covers only /v1, /v2, /inference and /cohere; the
dev-mode RL routes (/pause, /update_weights, /collective_rpc, ...) stay open,
so anyone who can reach the port could pause the server or push weights. This
middleware asks for the same bearer token (from VLLM_API_KEY, which vLLM also
reads, so the key never appears on a command line) on every path except the
liveness probes. Imports only the standard library and starlette (which vLLM
depends on).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from typing import Any, Awaitable, Callable

from starlette.responses import JSONResponse

__all__ = ["OPEN_PATHS", "require_api_key"]

OPEN_PATHS = frozenset({"/health", "/ping", "/version"})


def _digest(value: str) -> bytes:
    return hashlib.sha256(value.encode("utf-8")).digest()


async def require_api_key(request: Any, call_next: Callable[[Any], Awaitable[Any]]) -> Any:
    key = os.environ.get("VLLM_API_KEY", "")
    path = request.url.path
    if not key or request.method == "OPTIONS" or path in OPEN_PATHS:
        return await call_next(request)
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(_digest(token), _digest(key)):
        return JSONResponse({"error": f"Unauthorized: {path} needs 'Authorization: Bearer <api key>'"},
                            status_code=401)
    return await call_next(request)
