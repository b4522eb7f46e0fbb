"""The sandbox's first process: runs each request's candidate (and its judge) and reports.

Standard library only: this file runs inside the sandbox under `python -I -S`,
never in our process. `python jail.py CONFIG` reads one JSON request per stdin
line and answers one JSON line each; CONFIG (JSON) says what the sandbox lets
it do:
- `uids`: [candidate, judge] unprivileged uids (when the jail is root), so the
  candidate can neither signal nor read the judge; null: one uid for both,
  with every process of the jail non-dumpable (no ptrace, no /proc/PID/fd,
  no /proc/PID/mem across processes);
- `private`: each run gets its own mount and IPC namespace with a fresh /tmp
  of the run's `tmp_mb` (needs CAP_SYS_ADMIN): nothing a run leaves in /tmp,
  SysV IPC or POSIX queues outlives it, and a warm slot obeys each run's limits;
- `cgroup`: a memory cgroup the run joins, limited to the run's `memory_mb`,
  so the limit binds the whole run, not each process;
- `once`: answer one request, then exit (the cold backends);
- `tmp`: the runs' working directory; `site`: give the candidate the
  interpreter's own third-party packages.

A run: a leader process (in the private namespaces and the cgroup) forks the
candidate and, for a judged run, the judge, each with its rlimits and the
seccomp filter (`seccomp.py`); the candidate's module runs as `__main__`,
then, for a judged run, answers the judge's calls (`crossing.serve`). The
judge writes its verdict to fd 5, a memory file nobody else holds. At the end
(the judge or candidate exited, or the wall-clock limit) every process of the
run is killed.

The candidate inherits its leader's whole address space, and can read all of
it (its frames, `gc`, `/proc/self/mem`). So no leader is ever forked from a
process that held a judge: before it reads its first request, the jail forks a
spawner, and every leader is forked from that spawner, which only ever passes
file descriptors on. The jail keeps each request's candidate part and the
judge's source in two memory files; the leader reads the first, forks the
candidate, and only then reads the judge's source. No byte of any judge is
in memory a candidate inherits, on the warm and the cold backends alike.
"""

import ctypes
import json
import os
import resource
import select
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import crossing  # noqa: E402
import rooms  # noqa: E402
import seccomp  # noqa: E402

# warm: a forked child finds these imported (HumanEval prompts import typing, math, ...)
import bisect, collections, functools, hashlib, heapq, itertools, math, re, string, typing  # noqa: E401,E402,F401

_VERDICT_BYTES = 1 << 20
_libc = ctypes.CDLL(None, use_errno=True)


def _set_dumpable(on):
    _libc.prctl(4, int(on), 0, 0, 0)  # PR_SET_DUMPABLE


def _child(program, fds, uid, rlimits, tmp, site=False, serve=None, judge=False):
    """Become one process of the run, then run `program` as __main__ (never returns)."""
    try:
        os.setsid()
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
        os.closerange(len(fds), 65536)
        os.chdir(tmp)
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        for name, (soft, hard) in rlimits.items():
            resource.setrlimit(getattr(resource, name), (soft, hard))
        seccomp.install()
        if site:  # the interpreter's own third-party packages (never our virtual environment)
            import site as _site
            _site.main()
        os.environ.clear()
        os.environ.update({"PATH": "/usr/bin:/bin", "HOME": tmp, "TMPDIR": tmp, "LANG": "C.UTF-8"})
        sys.stdin = sys.__stdin__ = open(0, "r", closefd=False)
        sys.stdout = sys.__stdout__ = open(1, "w", closefd=False)
        sys.stderr = sys.__stderr__ = open(2, "w", closefd=False)
        sys.argv = ["/sandbox/main.py"]
        code = compile(program, "/sandbox/main.py", "exec")
        scope = {"__name__": "__main__", "__file__": "/sandbox/main.py", "__builtins__": __builtins__}
        if judge:
            scope["_ludic_candidate"] = crossing.proxy()
            scope["_ludic_verdict"] = open(5, "w", buffering=1, closefd=False)
    except BaseException:  # noqa: BLE001 - a setup failure is the run's failure, never the jail's
        sys.__excepthook__(*sys.exc_info())
        _flush_exit(1)
    status = 0
    try:
        exec(code, scope)
        if serve is not None:
            crossing.serve(scope.get(serve) or _missing(serve))
    except SystemExit as e:  # as the interpreter treats it
        status = 0 if e.code is None else e.code & 0xFF if isinstance(e.code, int) else _print_exit(e.code)
    except BaseException as e:  # noqa: BLE001 - reported as the interpreter would (C-level, so deep stacks are quick)
        sys.__excepthook__(type(e), e, e.__traceback__.tb_next)
        status = 1
    _flush_exit(status)


def _missing(name):
    def absent(*args, **kwargs):
        raise NameError(f"name {name!r} is not defined")
    return absent


def _print_exit(code):
    print(code, file=sys.stderr)
    return 1


def _flush_exit(status):
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001
            pass
    os._exit(status)


def _wait(pid, deadline):
    """The wait status of `pid`, or None at the deadline."""
    fd = os.pidfd_open(pid)
    try:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
    finally:
        os.close(fd)
    return os.waitpid(pid, 0)[1] if ready else None


def _code(status):
    if status is None:
        return None
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def _lead(files, cfg):
    """The run's leader (a child of the spawner): set the run's rooms up, start, wait, kill, report.
    It reads the judge's source only once the candidate is forked."""
    report_fd = files["report"]
    try:
        req = json.loads(_read_all(files["request"]))
        _libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER: the candidate's orphans become ours to reap
        if cfg.get("private"):
            rooms.private_namespaces(req["tmp_mb"])
        if cfg.get("cgroup"):
            rooms.join_cgroup(cfg["cgroup"], req["memory_mb"])
        uids = cfg.get("uids") or [None, None]
        tmp = cfg.get("tmp", "/tmp")
        judged = bool(req.get("judged"))
        pipes = (os.pipe(), os.pipe()) if judged else ()
        cand_fds = (files["stdin"], files["stdout"], files["stderr"]) + (
            (pipes[0][0], pipes[1][1]) if judged else ())
        deadline = time.monotonic() + float(req["wall_s"])
        cand = os.fork()
        if cand == 0:
            _child(req["program"], cand_fds, uids[0], req["rlimits"], tmp, cfg.get("site", False),
                   serve=req.get("serve"))
        judge = None
        if judged:
            source = _read_all(files["judge"]).decode("utf-8", "surrogatepass")  # now, never before the fork above
            judge = os.fork()
            if judge == 0:
                devnull = os.open("/dev/null", os.O_RDONLY)
                _child(source, (devnull, files["judge_out"], files["judge_err"], pipes[0][1], pipes[1][0],
                                      files["verdict"]), uids[1], req["rlimits"], tmp, judge=True)
            for r, w in pipes:
                os.close(r)
                os.close(w)
        main = judge if judged else cand
        main_status = _wait(main, deadline)
        rooms.kill_uid(uids[0]) if uids[0] is not None else rooms.killpg(cand)  # the candidate and all it started
        if judge is not None:
            rooms.killpg(judge)  # the judge (our code) starts nothing
        if main_status is None:
            os.waitpid(main, 0)
        out = {"timed_out": main_status is None, "error": None,
               "cand": _code(main_status) if main == cand else _code(rooms.reap(cand)),
               "judge": _code(main_status) if judged else None}
        if uids[0] is not None:
            rooms.end_uid(uids[0])
    except BaseException as exc:  # noqa: BLE001 - the jail's own failure, said as such
        out = {"timed_out": False, "error": f"{type(exc).__name__}: {exc}"}
    os.write(report_fd, json.dumps(out).encode())
    os._exit(0)


def _memfd(name, data=b""):
    fd = os.memfd_create(name, 0)
    os.write(fd, data)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _tail(fd, n):
    size = os.fstat(fd).st_size
    os.lseek(fd, max(0, size - n), os.SEEK_SET)
    data = b""
    while len(data) < min(size, n):
        chunk = os.read(fd, n - len(data))
        if not chunk:
            break
        data += chunk
    return data.decode("utf-8", "replace")


def _read_all(fd):
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)


# what a leader is handed, in this order: the candidate's request, its standard streams, the judge's
# streams and verdict, the judge's source (read only after the candidate is forked), the report pipe
_FDS = ("request", "stdin", "stdout", "stderr", "judge_out", "judge_err", "verdict", "judge", "report")
_CANDIDATE_KEYS = ("program", "wall_s", "tmp_mb", "memory_mb", "rlimits", "serve")


class SpawnerGone(RuntimeError):
    """The spawner died: no clean process is left to fork leaders from, so the jail must end."""


def start_spawner(cfg):
    """Fork the process every run's leader comes from, before any request is read (see the module
    docstring). Returns the jail's end of a socket: send it a run's fds, receive the leader's pidfd."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:
        ours.close()
        _spawn(theirs, cfg)
    theirs.close()
    return ours


def _spawn(sock, cfg):
    """The spawner's loop (never returns): a leader per message, its pidfd sent back."""
    try:
        null = os.open("/dev/null", os.O_RDWR)
        os.dup2(null, 0)  # the jail's stdin holds requests: never ours to read
        os.dup2(null, 1)
        keep = sock.fileno()
        os.closerange(3, keep)
        os.closerange(keep + 1, 65536)
        while True:
            rooms.reap_children()
            _, fds, _, _ = socket.recv_fds(sock, 16, len(_FDS))
            if len(fds) != len(_FDS):  # the jail closed its end (or sent garbage): we are done
                break
            leader = os.fork()
            if leader == 0:
                sock.close()
                _lead(dict(zip(_FDS, fds)), cfg)
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(leader)
            socket.send_fds(sock, [b"L"], [pidfd])
            os.close(pidfd)
    except BaseException:  # noqa: BLE001 - the jail sees the socket close and ends
        pass
    os._exit(0)


def handle(req, cfg, spawner):
    """One run, as the reply dict."""
    start = time.monotonic()
    judged = req.get("judge") is not None
    candidate = {k: req[k] for k in _CANDIDATE_KEYS if k in req}
    candidate["judged"] = judged
    files = {"request": _memfd("request", json.dumps(candidate).encode()),
             "stdin": _memfd("stdin", req.get("stdin", "").encode("utf-8", "surrogatepass")),
             "judge": _memfd("judge", (req["judge"] if judged else "").encode("utf-8", "surrogatepass"))}
    for name in ("stdout", "stderr", "judge_out", "judge_err", "verdict"):
        files[name] = _memfd(name)
    r, files["report"] = os.pipe()
    pidfd = None
    try:
        try:
            socket.send_fds(spawner, [b"R"], [files[name] for name in _FDS])
            os.close(files.pop("report"))
            _, got, _, _ = socket.recv_fds(spawner, 16, 1)
        except OSError as exc:
            raise SpawnerGone(f"the jail's spawner is gone ({exc})") from None
        if not got:
            raise SpawnerGone("the jail's spawner died")
        pidfd = got[0]
        if not _exited(pidfd, start + float(req["wall_s"]) + 5.0):  # never: the leader's own wait ends at the deadline
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            _exited(pidfd, time.monotonic() + 5.0)
        report = json.loads(os.read(r, 65536) or b'{"error": "the run leader did not report"}')
        keep = int(req.get("output_chars", 8192))
        out = {"timed_out": report.get("timed_out", False), "error": report.get("error"),
               "wall_s": time.monotonic() - start, "returncode": report.get("cand"),
               "stdout": _tail(files["stdout"], keep), "stderr": _tail(files["stderr"], keep)}
        if judged:
            out["judge"] = {"returncode": report.get("judge"), "verdict": _tail(files["verdict"], _VERDICT_BYTES),
                            "stdout": _tail(files["judge_out"], keep), "stderr": _tail(files["judge_err"], keep)}
        return out
    finally:
        os.close(r)
        for fd in files.values():
            os.close(fd)
        if pidfd is not None:
            os.close(pidfd)


def _exited(pidfd, deadline):
    """Whether the process behind `pidfd` (a leader: the spawner's child, not ours) ended by `deadline`."""
    ready, _, _ = select.select([pidfd], [], [], max(0.0, deadline - time.monotonic()))
    return bool(ready)


def main():
    cfg = json.loads(sys.argv[1])
    seccomp._prepared()
    _set_dumpable(False)
    spawner = start_spawner(cfg)  # first: the spawner's memory never holds a request
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # a stray print can never corrupt the replies
    if not cfg.get("once"):
        replies.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        if not line.strip():
            continue
        gone = False
        try:
            reply = handle(json.loads(line), cfg, spawner)
        except SpawnerGone as exc:  # answered, then the jail ends: its slot is replaced
            reply, gone = {"error": str(exc)}, True
        except Exception as exc:  # noqa: BLE001 - a bad request is answered, never fatal
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        replies.write(json.dumps(reply) + "\n")
        if cfg.get("once") or gone:
            break


if __name__ == "__main__":
    main()
