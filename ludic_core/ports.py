"""`free_port`: a TCP port nobody listens on, for a server this process is about to start.

The port is free when asked, not reserved: the server binds it right after. Every local
server the library starts (Redis, vLLM, a weight-transfer rendezvous) and the tests'
Prefect servers and torchrun rendezvous ask here.
"""

from __future__ import annotations

import socket

__all__ = ["free_port"]


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
