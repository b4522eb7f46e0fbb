"""A real redis-server per test (`LocalRedis`: a free loopback port, a password,
append-only file on). No mock: the stream semantics under test (pending
entries, XAUTOCLAIM, group lag, MINID trimming, a server restart) are Redis's
own. CI installs the binary (`.ci/run`); a missing binary fails these tests
instead of skipping them."""

from __future__ import annotations

import pytest

PASSWORD = "s3cret-test-pw"


@pytest.fixture
def redis_server(tmp_path):
    from ludic_core.queue.redis_server import LocalRedis

    server = LocalRedis(tmp_path / "redis", password=PASSWORD).start()
    yield server
    server.kill()


@pytest.fixture
def client(redis_server):
    from ludic_core.queue import connect

    c = connect(redis_server.url, password=PASSWORD, retries=10)
    yield c
    c.close()
