"""Actor rounds in worker processes: a real round onto a real stream, a worker
SIGKILLed mid-round (its round fails naming the signal, wrote nothing, and a
retry under the same index lands exactly once in a fresh worker), and a round
that raises inside a worker (a clear error; the worker serves the next one)."""

import os
import signal
import threading
import time

import pytest

pytestmark = [pytest.mark.redis, pytest.mark.slow]


@pytest.fixture
def spec(redis_server, format_tuned_model_dir, tmp_path, monkeypatch):
    from tests.queue.conftest import PASSWORD
    from ludic_core.config import GRPOConfig
    from ludic_core.publish.directory import point_latest
    from ludic_core.queue import ActorSpec
    from ludic_core.recipes.tic_tac_toe import RECIPE

    monkeypatch.setenv("LUDIC_TEST_REDIS_PW", PASSWORD)  # workers inherit it; it is never in the spec
    point_latest(str(tmp_path / "policy"), format_tuned_model_dir, 0)
    return ActorSpec(env=RECIPE.env, agent=RECIPE.agent, algorithm=GRPOConfig(group_size=2), requests_per_round=2,
                     url=redis_server.url, password_env="LUDIC_TEST_REDIS_PW", key="pool:saw",
                     policy_dir=str(tmp_path / "policy"), max_seq_len=512)


def test_a_sigkilled_worker_fails_its_round_and_the_retry_lands_once(spec, client):
    from ludic_core.queue import SAWStream
    from ludic_core.queue.actor_pool import ActorPool, ActorProcessDied

    stream = SAWStream(client, key=spec.key)
    with ActorPool(1) as pool:
        outcome: dict = {}

        def play():
            try:
                outcome["out"] = pool.run(spec, 7)
            except Exception as e:  # noqa: BLE001 - the test inspects it
                outcome["error"] = e

        t = threading.Thread(target=play)
        t.start()
        deadline = time.monotonic() + 30
        while not pool.in_flight() and time.monotonic() < deadline:
            time.sleep(0.05)
        (pid, playing), = pool.in_flight().items()
        assert playing == 7
        time.sleep(1.0)  # mid-round: importing, loading the policy or decoding; never past its one write
        os.kill(pid, signal.SIGKILL)
        t.join(60)
        assert isinstance(outcome.get("error"), ActorProcessDied), outcome
        assert f"actor process {pid} died during round 7 (killed by SIGKILL)" in str(outcome["error"])
        assert stream.entries_added() == 0  # the killed round left nothing on the stream

        out = pool.run(spec, 7)  # the task's retry: same index, a fresh worker
        assert int(out["actor_pid"]) != pid
        assert out["added"] == out["items"] > 0
        again = pool.run(spec, 7)  # a retry of a round that had landed adds nothing
        assert again["added"] == 0
        assert stream.entries_added() == out["items"]
    assert not pool.in_flight()


def test_a_round_that_raises_in_a_worker_names_the_error_and_the_worker_serves_on(spec, tmp_path):
    from ludic_core.queue.actor_pool import ActorPool, ActorRoundFailed

    broken = spec.model_copy(update={"policy_dir": str(tmp_path / "nothing-published")})
    with ActorPool(1) as pool:
        with pytest.raises(ActorRoundFailed, match="FileNotFoundError: no published policy"):
            pool.run(broken, 1)
        out = pool.run(spec, 2)
        first_pid = int(out["actor_pid"])
        assert out["added"] > 0
        assert int(pool.run(spec, 3)["actor_pid"]) == first_pid  # the same worker played every round


def test_pool_arguments_are_checked():
    from ludic_core.queue.actor_pool import ActorPool, get_pool

    with pytest.raises(ValueError, match="size >= 1"):
        ActorPool(0)
    with pytest.raises(LookupError, match="no actor pool named 'gone'"):
        get_pool("gone")
