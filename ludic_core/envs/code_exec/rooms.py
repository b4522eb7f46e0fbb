"""A run's rooms, for `jail.py` (standard library only: it runs inside the sandbox): the
private mount and IPC namespace, the memory cgroup, and the end of every process of a uid.
"""

import ctypes
import os
import signal
import time

__all__ = ["private_namespaces", "join_cgroup", "kill_uid", "end_uid", "reap_children", "killpg", "reap"]

_CLONE_NEWNS, _CLONE_NEWIPC = 0x00020000, 0x08000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 16384, 1 << 18
_libc = ctypes.CDLL(None, use_errno=True)


def _check(rc, what):
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"{what}: {os.strerror(err)}")


def private_namespaces(tmp_mb):
    """A mount and IPC namespace of the run's own, with a fresh /tmp of `tmp_mb`."""
    _check(_libc.unshare(_CLONE_NEWNS | _CLONE_NEWIPC), "unshare")
    _check(_libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "mount --make-rprivate /")
    opts = f"size={int(tmp_mb)}m,mode=1777".encode()
    _check(_libc.mount(b"tmpfs", b"/tmp", b"tmpfs", _MS_NOSUID | _MS_NODEV, opts), "mount /tmp")


def join_cgroup(path, memory_mb):
    """Limit `path` to `memory_mb` (swap included) and move this process into it (v2, else v1 files)."""
    limit = str(int(memory_mb) * 1024 * 1024)
    if os.path.exists(os.path.join(path, "memory.max")):
        writes, required = [("memory.swap.max", "0"), ("memory.max", limit)], 1
    else:  # v1: memory+swap may never be below memory, so write memory, then memory+swap, then memory again
        writes, required = [("memory.limit_in_bytes", limit), ("memory.memsw.limit_in_bytes", limit)] * 2, 2
    for i, (name, value) in enumerate(writes):
        try:
            with open(os.path.join(path, name), "w") as f:
                f.write(value)
        except OSError:  # swap accounting may be off; only the final memory limit must hold
            if i == required:
                raise
    with open(os.path.join(path, "cgroup.procs"), "w") as f:
        f.write("0")


def kill_uid(uid):
    """Every process of `uid`: a helper becomes that uid and signals them all (itself included)."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def end_uid(uid, tries=1000):
    """No process of `uid` left, not even a zombie, before the run reports: SIGKILL is
    asynchronous, and an orphan the kill left a zombie would be seen by the slot's next run."""
    for _ in range(tries):
        reap_children()
        if not _processes_of(uid):
            return
        kill_uid(uid)  # again: a process forked while the last kill went round
        time.sleep(0.001)
    raise RuntimeError(f"processes of uid {uid} outlived the run")


def reap_children():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _processes_of(uid):
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    found.append(int(name))
            except OSError:  # it ended meanwhile
                pass
    return found


def killpg(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def reap(pid):
    """The status of a process already killed (None: it was killed by the end of the run, not by itself)."""
    status = os.waitpid(pid, 0)[1]
    return None if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL else status
