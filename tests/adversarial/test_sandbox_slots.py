"""Sealed slots: nothing one run leaves reaches the next run of the same warm
slot (or of a cold sandbox), and each run gets the limits it asked for.

Every probe runs twice in one slot (concurrency 1): run 1 plants something,
run 2 looks for it. Real bubblewrap; CI runs as root, as the warm backend needs."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from ludic_core.envs.code_exec import Limits, SandboxPool, make_sandbox
from ludic_core.envs.code_exec.cgroup import memory_root

LIMITS = Limits(wall_s=8.0, cpu_s=6, memory_mb=256, processes=16, file_mb=64, tmp_mb=32)
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="the warm backend and uid separation need root (CI is root)")

_LIBC = "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"

# (what it plants, how the next run looks for it: prints LEAK if found)
PROBES = {
    "SysV shared memory": (
        _LIBC + "sid = libc.shmget(4242, 4096, 0o1666)\nassert sid >= 0, ctypes.get_errno()\n"
                "addr = ctypes.c_void_p(libc.shmat(sid, None, 0)); libc.shmat.restype = ctypes.c_void_p\n",
        _LIBC + "print('LEAK' if libc.shmget(4242, 0, 0o666) >= 0 else 'none')\n"),
    "SysV message queue": (
        _LIBC + "assert libc.msgget(4343, 0o1666) >= 0\n",
        _LIBC + "print('LEAK' if libc.msgget(4343, 0o666) >= 0 else 'none')\n"),
    "a 1 GB SysV segment": (
        _LIBC + "assert libc.shmget(4444, 1 << 30, 0o1666) >= 0\n",
        "print('LEAK' if open('/proc/sysvipc/shm').read().count('\\n') > 1 else 'none')\n"),
    "kernel keyring": (
        _LIBC + "k = libc.syscall(248, b'user', b'ludic', b'secret', 6, -4)\nprint('added' if k >= 0 else 'refused')\n",
        _LIBC + "k = libc.syscall(249, b'user', b'ludic', None, -4)\nprint('LEAK' if k >= 0 else 'none')\n"),
    "files in /tmp": (
        "open('/tmp/planted', 'w').write('x')\n",
        "import os\nprint('LEAK' if os.path.exists('/tmp/planted') else 'none')\n"),
    "a /tmp tree 1200 directories deep": (
        "import os\nos.chdir('/tmp')\nfor _ in range(1200):\n    os.mkdir('d')\n    os.chdir('d')\n",
        "import os\nprint('LEAK' if os.listdir('/tmp') else 'none')\n"),
    "a process left running": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    open('/tmp/alive', 'w')\n    time.sleep(60)\n",
        "import os\nmine = [p for p in os.listdir('/proc') if p.isdigit() and int(p) != os.getpid()\n"
        "        and os.stat(f'/proc/{p}').st_uid == os.getuid()]\nprint('LEAK' if mine else 'none')\n"),
}


@pytest.fixture(scope="module", params=[pytest.param("bwrap-warm", marks=needs_root), "bwrap-cold"])
def slot(request):
    with SandboxPool(make_sandbox(request.param), concurrency=1, limits=LIMITS) as p:
        yield p


@pytest.mark.parametrize("probe", list(PROBES))
def test_nothing_survives_from_one_run_to_the_next(slot, probe):
    plant, look = PROBES[probe]
    first = slot.run(plant)
    assert first.status in ("ok", "error"), first  # a refusal is fine; a dead server is not
    assert "stopped answering" not in first.stderr
    second = slot.run(look)
    assert second.ok and second.stdout.strip() == "none", (probe, first, second)


def test_keyrings_and_user_namespaces_are_refused(slot):
    r = slot.run(_LIBC + "print(libc.syscall(248, b'user', b'k', b'v', 1, -4), ctypes.get_errno())\n"
                        "print(libc.unshare(0x10000000), ctypes.get_errno())\n"
                        "pid = os.fork()\nif pid == 0:\n    os._exit(libc.unshare(0x10000000) != -1)\n"
                        "print(os.waitpid(pid, 0)[1])\n")
    assert r.ok and r.stdout.split() == ["-1", "1", "-1", "1", "0"], r


def test_each_run_gets_its_own_tmp_size(slot):
    write = "open('/tmp/f', 'wb').write(b'x' * (24 << 20))\nprint('wrote')\n"
    small = slot.run(write, limits=LIMITS.model_copy(update={"tmp_mb": 8}))
    large = slot.run(write, limits=LIMITS.model_copy(update={"tmp_mb": 64}))
    small_again = slot.run(write, limits=LIMITS.model_copy(update={"tmp_mb": 8}))
    assert not small.ok and large.ok and large.stdout == "wrote\n" and not small_again.ok, (small, large, small_again)


@needs_root
def test_memory_binds_the_whole_run_where_a_cgroup_exists(slot):
    """4 children of 400 MB each under memory_mb=1024: per-process limits
    alone let all 4 through (1.6 GB); the run's cgroup lets at most 2."""
    if memory_root() is None:
        pytest.skip("no writable memory cgroup here: the limit is per process (stated in Limits.memory_mb)")
    prog = ("import os, time\npids = []\nfor _ in range(4):\n    pid = os.fork()\n    if pid == 0:\n"
            "        b = bytearray(400 << 20)\n        for i in range(0, len(b), 4096):\n            b[i] = 1\n"
            "        time.sleep(1.5)\n        os._exit(0)\n    pids.append(pid)\n"
            "print(sum(os.waitpid(p, 0)[1] == 0 for p in pids))\n")
    r = slot.run(prog, limits=LIMITS.model_copy(update={"memory_mb": 1024, "wall_s": 20, "cpu_s": 15}))
    assert r.ok and int(r.stdout) <= 2, r


def test_a_lone_surrogate_is_a_failed_run_not_an_exception(slot):
    r = slot.run("print('\ud800')")
    assert not r.ok and r.status == "error", r
    assert slot.run("print(1)").ok


def test_deep_recursion_fails_fast(slot):
    r = slot.run("import sys\nsys.setrecursionlimit(10 ** 6)\ndef f(n):\n    return f(n + 1)\nf(0)\n",
                 limits=LIMITS.model_copy(update={"wall_s": 20, "cpu_s": 15}))
    assert r.status in ("error", "killed") and r.wall_s < 10, r


@needs_root
def test_two_processes_never_share_a_uid_block():
    """Blocks are reserved by a lock held for the process's life, not derived from the pid."""
    prog = ("from ludic_core.envs.code_exec import make_sandbox, Limits\nimport time\n"
            "sb = make_sandbox('bwrap-cold')\nprint(sb.run('import os\\nprint(os.getuid())', limits=Limits()).stdout.strip(),"
            " flush=True)\ntime.sleep(3)\n")
    procs = [subprocess.Popen([sys.executable, "-c", prog], stdout=subprocess.PIPE, text=True) for _ in range(3)]
    uids = [int(p.communicate(timeout=60)[0]) for p in procs]
    assert len({u // 1024 for u in uids}) == 3, uids
