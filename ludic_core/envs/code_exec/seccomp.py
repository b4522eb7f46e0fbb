"""A seccomp filter for model-written code (standard library only: it runs inside the sandbox).

Namespaces, uids and rlimits already keep a candidate from the host; this
filter closes the kernel features that would let one run reach another, or
reach the judge beside it, through state the namespaces do not cover:

- keyrings (`keyctl`, `add_key`, `request_key`): the user keyring belongs to a
  uid and outlives every process, so a key added in one run is read by the next;
- user namespaces (`unshare` / `clone` with CLONE_NEWUSER, and `clone3`, whose
  flags a filter cannot read: it answers ENOSYS and glibc falls back to `clone`):
  the one namespace an unprivileged process may create, and the door to the rest;
- other processes' memory (`ptrace`, `process_vm_readv` / `writev`);
- `bpf`, `perf_event_open`, `userfaultfd` and io_uring (whose operations a
  filter never sees).

Everything else is allowed: threads, fork, subprocess, sockets (in a network
namespace with no interface but loopback). A syscall of another ABI (i386 or
x32 on x86-64) kills the process. `install()` sets no_new_privs first, so no
set-uid binary regains what was dropped.
"""

from __future__ import annotations

import platform
import struct

__all__ = ["ARCHES", "DENIED", "filter_program", "install"]

EPERM, ENOSYS = 1, 38
CLONE_NEWUSER = 0x10000000
_RET_ALLOW, _RET_ERRNO, _RET_KILL = 0x7FFF0000, 0x00050000, 0x80000000
_LD_ABS_W, _JEQ, _JGE, _JSET, _RET = 0x20, 0x15, 0x35, 0x45, 0x06
_NR, _ARCH, _ARG0 = 0, 4, 16  # offsets in struct seccomp_data (args are u64, little-endian: low word first)
_X32_BIT = 0x40000000

DENIED = ("keyctl", "add_key", "request_key", "ptrace", "process_vm_readv", "process_vm_writev", "bpf",
          "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register")

# machine -> (AUDIT_ARCH_*, syscall numbers)
ARCHES: dict[str, tuple[int, dict[str, int]]] = {
    "x86_64": (0xC000003E, {"clone": 56, "clone3": 435, "unshare": 272, "keyctl": 250, "add_key": 248,
                            "request_key": 249, "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311,
                            "bpf": 321, "perf_event_open": 298, "userfaultfd": 323, "io_uring_setup": 425,
                            "io_uring_enter": 426, "io_uring_register": 427}),
    "aarch64": (0xC00000B7, {"clone": 220, "clone3": 435, "unshare": 97, "keyctl": 219, "add_key": 217,
                             "request_key": 218, "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                             "bpf": 280, "perf_event_open": 241, "userfaultfd": 282, "io_uring_setup": 425,
                             "io_uring_enter": 426, "io_uring_register": 427}),
}


def filter_program(machine: str | None = None) -> bytes:
    """The classic-BPF program (struct sock_filter[]) for `machine` (default: this one)."""
    machine = machine or platform.machine()
    if machine not in ARCHES:
        raise OSError(f"no seccomp filter for {machine!r} (known: {', '.join(ARCHES)})")
    audit, nr = ARCHES[machine]
    code: list[tuple[int, str | int, str | int, int]] = [  # (op, jump if true, jump if false, k); labels resolved below
        (_LD_ABS_W, 0, 0, _ARCH), (_JEQ, 0, "kill", audit), (_LD_ABS_W, 0, 0, _NR)]
    if machine == "x86_64":
        code.append((_JGE, "kill", 0, _X32_BIT))
    code += [(_JEQ, "eperm", 0, nr[name]) for name in DENIED]
    code += [(_JEQ, "enosys", 0, nr["clone3"]), (_JEQ, "flags", 0, nr["unshare"]), (_JEQ, "flags", 0, nr["clone"]),
             (_RET, 0, 0, _RET_ALLOW)]
    labels = {"flags": len(code)}
    code += [(_LD_ABS_W, 0, 0, _ARG0), (_JSET, "eperm", 0, CLONE_NEWUSER), (_RET, 0, 0, _RET_ALLOW)]
    labels.update(eperm=len(code), enosys=len(code) + 1, kill=len(code) + 2)
    code += [(_RET, 0, 0, _RET_ERRNO | EPERM), (_RET, 0, 0, _RET_ERRNO | ENOSYS), (_RET, 0, 0, _RET_KILL)]

    def offset(at: int, target: str | int) -> int:
        return target if isinstance(target, int) else labels[target] - at - 1

    return b"".join(struct.pack("=HBBI", op, offset(i, jt), offset(i, jf), k) for i, (op, jt, jf, k) in enumerate(code))


def install() -> None:
    """Apply the filter to this process and everything it starts (irreversible)."""
    prctl, prog = _prepared()
    pr_set_no_new_privs, pr_set_seccomp, seccomp_mode_filter = 38, 22, 2
    if prctl(pr_set_no_new_privs, 1, 0, 0, 0) != 0:
        raise OSError("prctl(PR_SET_NO_NEW_PRIVS) failed")
    if prctl(pr_set_seccomp, seccomp_mode_filter, prog, 0, 0) != 0:
        raise OSError("prctl(PR_SET_SECCOMP) failed")


_PREPARED: tuple | None = None


def _prepared() -> tuple:
    """(prctl, pointer to the struct sock_fprog), built once: a fork server prepares it before forking."""
    global _PREPARED
    if _PREPARED is None:
        import ctypes

        program = filter_program()
        buf = ctypes.create_string_buffer(program, len(program))

        class _Prog(ctypes.Structure):
            _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

        prog = _Prog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
        _PREPARED = (ctypes.CDLL(None).prctl, ctypes.byref(prog), buf, prog)
    return _PREPARED[:2]
