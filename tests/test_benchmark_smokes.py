"""Every script in benchmarks/ runs at its smoke size, so none can rot unseen (issue 56).

`python benchmarks/NAME.py --smoke` runs every code path of the script at toy sizes (tiny models
built offline, a few steps) and measures nothing. Each runs here as a real subprocess from the repo
root; the test checks only that it exits 0 and prints its ratio line, in the form every benchmark
uses:

    ratio (A / B)[ what, where]: 1.23x[   notes]       or, with nothing to divide:   ...: n/a, why

Smokes over ~20 s are marked `heavy` (`make test-heavy`; .ci/run runs both), and those that start
their own vLLM server (the CPU build in .venv-vllm, `make vllm`) or redis-server are marked `vllm`
/ `redis` as well. Seconds are on the 2-core CI machine under load. A script with no smoke yet is
named in NO_SMOKE with the reason, so a new script without one fails the inventory test.

Scripts that run the flows get the API of one `prefect server start` per test worker
(PREFECT_API_URL), as a user with a server would: without it each started Prefect's temporary
server on a fresh database, 20-27 s of every such smoke.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"

#: the uniform ratio line (see the module docstring)
RATIO_LINE = re.compile(r"^ratio \([^()\n]+ / [^()\n]+\)[^:\n]*: (\d+(\.\d+)?x|n/a)", re.M)

heavy = pytest.mark.heavy
vllm = pytest.mark.vllm
redis = pytest.mark.redis


def smoke(script: str, *extra: str, marks=(), also: tuple[str, ...] = (), timeout: int = 300):
    """One parametrized case: `script --smoke *extra`; `also`: more text its output must hold."""
    # the id keeps ".py": conftest skips every test with a keyword `gpu` (which an id "gpu" would be)
    return pytest.param(script, ("--smoke", *extra), also, timeout, marks=marks, id=" ".join((script, *extra)))


SMOKES = [  # seconds: two runs on the 2-core machine beside other jobs
    # default suite (`make test`): 70-90 s of subprocess time in all, spread over its 2 workers
    smoke("checkpoint_hash.py"),                    # 15-19 s
    smoke("multi_turn.py"),                         # 15 s (its 2-step warm start is cached after the first run)
    smoke("openmp_threads.py"),                     # 6-9 s
    smoke("packing.py"),                            # 10-17 s
    smoke("rollout_throughput.py", "--ragged", "--vocab", "512"),  # 10-12 s
    smoke("sandbox.py"),                            # 2 s
    smoke("trainer_overhead.py"),                   # 12 s
    # heavy (`make test-heavy`)
    smoke("group_signal.py", marks=heavy),          # 13-18 s
    smoke("lora_publish.py", marks=heavy),          # 13-23 s
    smoke("trainer_memory.py", marks=heavy),        # 20-26 s: two child processes
    smoke("rollout_throughput.py", "--compiled", marks=heavy),  # 26-60 s: inductor compiles the decode step
    smoke("gpu.py", marks=heavy),                   # 37 s; without CUDA its CPU twin (it says so)
    smoke("gpu_decode.py", marks=heavy),            # 21-38 s; the CPU twin too: a compiled decode step
    smoke("learning_tic_tac_toe.py", marks=heavy),  # 70 s: the demo chain's flows
    smoke("learning_arithmetic.py", marks=heavy),   # 66-74 s
    smoke("learning_textarena.py", marks=heavy),    # 89-104 s: both recipes' chains
    smoke("orchestration_overhead.py", marks=heavy),  # 75-88 s
    smoke("pipeline_rl.py", marks=(heavy, redis), timeout=600),  # 92 s: rl_train + two pipelines
    smoke("grpo_step.py", marks=heavy),             # 30 s warm, +25 s for the 2-step warm start (multi_turn's, cached)
    smoke("algorithms.py", marks=heavy),            # 43 s warm, 80 s cold: the demo's stages (cached), then 2 cells
    smoke("demo_rl.py", marks=heavy),               # 35-63 s: toy SFT and RL stages (flows), four exact scores
    smoke("time_to_target.py", marks=heavy, timeout=600,  # 25-35 s warm, +~90 s for its cached warm start
          also=("contestant", "ratio (ludic seconds to target / TRL's")),  # (was test_benchmark_time_to_target's)
    smoke("inference_server.py", marks=(heavy, vllm), timeout=600),  # 106 s: one vLLM server (two: 253 s)
    smoke("lora_publish.py", "--vllm", marks=(heavy, vllm), timeout=600),  # 67-72 s
    smoke("teacher_student.py", marks=(heavy, vllm), timeout=600),  # 165-212 s
    smoke("distill_vs_sft.py", marks=heavy),        # 15-20 s: an untrained teacher, 2 steps per arm
    smoke("distill_vs_sft.py", "--task", "count_bits", marks=heavy),  # 15-20 s: the reasoning-gym half
]

#: scripts without a --smoke yet, and why (none today)
NO_SMOKE: dict[str, str] = {}


def test_every_benchmark_script_has_a_smoke_or_a_reason():
    scripts = {p.name for p in BENCHMARKS.glob("*.py") if not p.name.startswith("_")}
    smoked = {case.values[0] for case in SMOKES}
    assert scripts - smoked - set(NO_SMOKE) == set(), "benchmarks without a smoke here (add one to SMOKES)"
    assert (smoked | set(NO_SMOKE)) - scripts == set(), "SMOKES / NO_SMOKE name scripts that are gone"
    assert not smoked & set(NO_SMOKE)


def runs_flows(script: str, seen: frozenset[str] = frozenset()) -> bool:
    """Whether the script imports the flows, itself or through another benchmark module it imports."""
    text = (BENCHMARKS / script).read_text()
    if re.search(r"^\s*(from|import) flows\b", text, re.M):
        return True
    local = {f"{m}.py" for m in re.findall(r"^\s*from (\w+) import", text, re.M)}
    return any(runs_flows(m, seen | {script}) for m in local - seen if (BENCHMARKS / m).exists())


@pytest.fixture(scope="module")
def prefect_server(tmp_path_factory, prefect_db):
    """One Prefect API server for this worker's smokes that run flows; its URL."""
    from ludic_core.ports import free_port
    from tests.prefect_layer.stack import _stop, base_env, start_server

    tmp = tmp_path_factory.mktemp("smokes-prefect")
    api_url = f"http://127.0.0.1:{free_port()}/api"
    server = start_server(api_url, base_env(api_url, tmp / "home", prefect_db), tmp / "server.log", timeout_s=180)
    try:
        yield api_url
    finally:
        _stop(server)


def test_the_flow_scripts_are_told_apart():
    assert runs_flows("teacher_student.py") and runs_flows("learning_arithmetic.py")  # the latter by its import
    assert not runs_flows("packing.py") and not runs_flows("time_to_target.py")


@pytest.mark.slow
@pytest.mark.parametrize("script,args,also,timeout", SMOKES)
def test_the_smoke_runs_and_prints_its_ratio_line(script, args, also, timeout, tmp_path, request):
    if request.node.get_closest_marker("vllm"):
        from ludic_core.vllm.setup import env_python

        if not env_python().exists():  # as the vllm_server fixture: a missing environment fails, never skips
            pytest.fail(f"no vLLM environment at {env_python().parent.parent}: run `make vllm`")
    env = {**os.environ, "PREFECT_HOME": str(tmp_path / "prefect-home"), "PREFECT_SERVER_ANALYTICS_ENABLED": "false"}
    if runs_flows(script):
        env["PREFECT_API_URL"] = request.getfixturevalue("prefect_server")
    res = subprocess.run([sys.executable, str(BENCHMARKS / script), *args], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=timeout)
    assert res.returncode == 0, f"{script} {' '.join(args)} exited {res.returncode}:\n{res.stderr[-4000:]}"
    assert RATIO_LINE.search(res.stdout), f"{script} printed no ratio line:\n{res.stdout[-3000:]}"
    for text in also:
        assert text in res.stdout, res.stdout[-3000:]
