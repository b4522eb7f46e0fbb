"""Hostile code in the bubblewrap sandbox (real bwrap; CI installs it): each
attempt is contained and reported as a failure, the host is untouched, and the
pool serves a normal program afterwards."""

from __future__ import annotations

import os
import secrets
import socket
import time
from pathlib import Path

import pytest

from ludic_core.envs.code_exec import BwrapSandbox, Limits, SandboxError, SandboxPool, SubprocessSandbox, make_sandbox
from tests.procs import host_processes_with

LIMITS = Limits(wall_s=4.0, cpu_s=3, memory_mb=512, processes=16, file_mb=8, tmp_mb=32)


@pytest.fixture(scope="module", params=["bwrap-warm", "bwrap-cold"])
def pool(request):
    """Both bubblewrap backends: a warm fork server per slot, and a fresh sandbox per run."""
    with SandboxPool(make_sandbox(request.param), concurrency=2, limits=LIMITS) as p:
        yield p


def still_serves(pool) -> None:
    r = pool.run("print(6 * 7)")
    assert r.ok and r.stdout.strip() == "42", r


def test_a_normal_program_runs_and_its_failures_are_named(pool):
    r = pool.run("import sys\nprint('out')\nprint('err', file=sys.stderr)")
    assert r.ok and r.stdout == "out\n" and r.stderr == "err\n"
    r = pool.run("raise ValueError('bad input')")
    assert r.status == "error" and r.returncode == 1 and r.reason() == "exit status 1: ValueError: bad input"
    r = pool.run("import sys\nsys.exit(3)")
    assert r.status == "error" and r.returncode == 3


def test_infinite_loop_is_killed_at_the_wall_clock_limit(pool):
    t = time.monotonic()
    r = pool.run("while True:\n    pass", limits=LIMITS.model_copy(update={"wall_s": 1.5, "cpu_s": 30}))
    assert r.status == "timeout" and not r.ok and "timed out" in r.reason()
    assert time.monotonic() - t < 4
    still_serves(pool)


def test_cpu_limit_kills_a_spinning_program(pool):
    r = pool.run("while True:\n    pass", limits=LIMITS.model_copy(update={"wall_s": 10, "cpu_s": 1}))
    assert r.status == "killed" and r.reason() in ("killed by SIGXCPU", "killed by SIGKILL"), r
    assert r.wall_s < 5


def test_fork_bomb_is_bounded_and_cleaned_up(pool):
    token = secrets.token_hex(8)
    bomb = f"import os\n# {token}\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
    r = pool.run(bomb, limits=LIMITS.model_copy(update={"wall_s": 2.0}))
    assert not r.ok
    time.sleep(0.5)
    assert not host_processes_with(token)  # the whole pid namespace went with it
    still_serves(pool)


def test_process_limit_binds(pool):
    r = pool.run("import threading, time\nts = [threading.Thread(target=time.sleep, args=(2,)) for _ in range(40)]\n"
                 "[t.start() for t in ts]")
    assert r.status == "error" and "can't start new thread" in r.stderr


def test_ten_gigabyte_allocation_fails(pool):
    r = pool.run("x = bytearray(10 * 1024 ** 3)")
    assert r.status == "error" and "MemoryError" in r.stderr
    still_serves(pool)


def test_ten_gigabyte_file_is_stopped_at_the_file_size_limit(pool):
    r = pool.run("f = open('/tmp/big', 'wb')\nchunk = b'x' * (1 << 20)\nfor _ in range(10 * 1024):\n"
                 "    f.write(chunk)")
    assert r.status == "error" and "File too large" in r.stderr
    r = pool.run("import sys\nfor _ in range(10 ** 9):\n    sys.stdout.write('y' * 65536)")  # stdout is capped too
    assert not r.ok and len(r.stdout) <= LIMITS.output_chars
    still_serves(pool)


def test_no_network_even_to_loopback(pool):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        r = pool.run(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)")
        assert r.status == "error" and ("ConnectionRefusedError" in r.stderr or "unreachable" in r.stderr), r
        server.settimeout(0.2)
        with pytest.raises(socket.timeout):
            server.accept()  # nothing reached the host's listener
    finally:
        server.close()


def test_the_environment_and_the_host_are_out_of_reach(pool, monkeypatch):
    secret = secrets.token_hex(12)
    monkeypatch.setenv("LUDIC_TEST_SECRET", secret)
    monkeypatch.setenv("WANDB_API_KEY", secret)
    r = pool.run("import os\nprint(dict(os.environ))\n"
                 "for p in os.listdir('/proc'):\n"
                 "    if p.isdigit():\n"
                 "        try:\n            print(open(f'/proc/{p}/environ', 'rb').read())\n"
                 "        except OSError as e:\n            print(e)\n"
                 "print(os.listdir('/'))\nprint(os.path.exists(os.path.expanduser('~/.ssh')))")
    assert r.ok, r
    assert secret not in r.stdout and "LUDIC_" not in r.stdout and "WANDB" not in r.stdout
    assert str(Path.cwd()) not in r.stdout  # the project is not mounted


def test_writing_outside_tmp_fails_and_tmp_is_private(pool, tmp_path):
    target = tmp_path / "escaped"
    r = pool.run(f"open({str(target)!r}, 'w').write('x')")
    assert r.status == "error" and not target.exists()
    r = pool.run("open('/usr/evil', 'w')")
    assert r.status == "error" and "Read-only file system" in r.stderr
    assert pool.run("open('/tmp/mine', 'w').write('a')\nprint(open('/tmp/mine').read())").stdout == "a\n"
    assert "False" in pool.run("import os\nprint(os.path.exists('/tmp/mine'))").stdout  # a fresh /tmp each run


def test_killing_its_parent_fails(pool):
    r = pool.run("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)")
    assert r.status == "error" and "Operation not permitted" in r.stderr
    still_serves(pool)


def test_a_background_process_does_not_outlive_the_attempt(pool):
    token = secrets.token_hex(8)
    r = pool.run("import subprocess, sys\n"
                 f"subprocess.Popen([sys.executable, '-c', 'import time  # {token}\\ntime.sleep(60)'], "
                 "start_new_session=True)\nprint('spawned', flush=True)")
    assert r.ok and r.stdout == "spawned\n"
    time.sleep(0.3)
    assert not host_processes_with(token)
    still_serves(pool)


def test_the_unsandboxed_backend_needs_an_explicit_opt_in(caplog):
    with pytest.raises(SandboxError, match="allow_unsandboxed=True"):
        SubprocessSandbox()
    sb = SubprocessSandbox(allow_unsandboxed=True)
    with caplog.at_level("WARNING"):
        r = sb.run("print('ran')", limits=LIMITS)
        sb.run("print('ran')", limits=LIMITS)
    assert r.ok and r.stdout == "ran\n"
    assert sum("WITHOUT a sandbox" in m for m in caplog.messages) == 2  # every start warns


def test_pool_reports_rate_and_latency():
    with SandboxPool(BwrapSandbox(), concurrency=2, limits=LIMITS) as p:
        for _ in range(4):
            p.run("pass")
        p.run("raise SystemExit(1)")
        s = p.stats()
    assert s["executions"] == 5 and s["status/ok"] == 4 and s["status/error"] == 1
    assert 0 < s["p50_ms"] <= s["p99_ms"] and s["per_s"] > 0


def test_nearest_rank_quantiles():
    from ludic_core.envs.code_exec.pool import _quantile

    xs = [1.0, 2.0, 3.0, 4.0]
    assert _quantile(xs, 0.5) == 2.0 and _quantile(xs, 0.99) == 4.0 and _quantile(xs, 0.75) == 3.0
    assert _quantile([5.0], 0.5) == 5.0
    assert _quantile(list(map(float, range(1, 101))), 0.99) == 99.0


def test_sandbox_runs_as_an_unprivileged_uid_of_its_own(pool):
    if os.geteuid() != 0:
        pytest.skip("uid separation applies when the pool runs as root (as in CI)")
    uid = int(pool.run("import os\nprint(os.getuid())").stdout)
    assert uid >= 1_000_000


def test_two_sandboxes_in_one_process_never_share_a_uid():
    if os.geteuid() != 0:
        pytest.skip("uid separation applies when the pool runs as root (as in CI)")
    from concurrent.futures import ThreadPoolExecutor

    from ludic_core.envs.code_exec import WarmBwrapSandbox

    boxes = [WarmBwrapSandbox(), BwrapSandbox()]
    prog = "import os, time\ntime.sleep(0.5)\nprint(os.getuid())"
    with ThreadPoolExecutor(4) as ex:
        uids = list(ex.map(lambda b: int(b.run(prog, limits=LIMITS).stdout), boxes * 2))
    boxes[0].close()
    assert len(set(uids)) == 4  # four executions at once, four uids


def test_docker_backend_command_isolates_and_says_whether_a_daemon_runs(tmp_path):
    """No daemon runs on this machine kind: the command line is checked as
    pure logic, and `available()` answers instead of hanging."""
    import shutil

    from ludic_core.envs.code_exec import DockerSandbox

    if not (shutil.which("docker") or shutil.which("podman")):
        with pytest.raises(SandboxError, match="neither docker nor podman"):
            DockerSandbox()
        return
    box = DockerSandbox()
    cmd = box.command(LIMITS, {"once": True}, None)
    for flag in (["--network", "none"], ["--read-only"], ["--pids-limit", "16"], ["--memory", "512m"],
                 ["--cap-drop", "ALL"], ["--user", "65534:65534"]):
        assert any(cmd[i:i + len(flag)] == flag for i in range(len(cmd))), flag
    assert isinstance(box.available(), bool)


def test_concurrent_unsandboxed_runs_each_get_their_own_working_directory():
    """The subprocess backend's per-run directory is the run's, not the sandbox object's."""
    with SandboxPool(SubprocessSandbox(allow_unsandboxed=True), concurrency=4, limits=LIMITS) as p:
        from concurrent.futures import ThreadPoolExecutor

        prog = ("import os, time\nopen('mine', 'w').write(str(os.getpid()))\ntime.sleep(0.3)\n"
                "print(os.getcwd(), open('mine').read() == str(os.getpid()))")
        with ThreadPoolExecutor(4) as ex:
            outs = [r.stdout.split() for r in ex.map(lambda _: p.run(prog), range(4))]
    assert all(ok == "True" for _, ok in outs) and len({cwd for cwd, _ in outs}) == 4, outs
    assert not any(os.path.exists(cwd) for cwd, _ in outs)  # removed after each run
