"""A small seccomp filter for the grading sandbox (classic BPF, written by hand; bwrap loads it with --seccomp FD).

It closes what the per-process address-space limit (RLIMIT_AS) does not count and what would let a submission
leave its namespaces:

- memory outside the address space: `memfd_create` and `memfd_secret` (anonymous files that hold RAM without a
  mapping), `shmget` (SysV shared memory) fail with EPERM; files in /tmp and /dev/shm are bounded by the
  size of their tmpfs (see `sandbox.command`);
- nested user namespaces: `unshare` and `clone` with CLONE_NEWUSER, and `setns`, fail with EPERM; `clone3`
  (whose flags sit behind a pointer a filter cannot read) fails with ENOSYS, so the C library falls back to
  `clone`, whose flags the filter reads;
- other ABIs: a syscall made through the x32 or i386 entry points fails with ENOSYS (their numbers differ).

Every other syscall is allowed. x86-64 only: `program()` returns None on other machines (the README says
which guarantees need it). The seccomp_data layout: nr (u32) at 0, arch (u32) at 4, args[i] (u64) at 16 + 8i;
the low 32 bits of args[0] (little-endian) at 16.
"""
from __future__ import annotations

import errno
import platform
import struct

AUDIT_ARCH_X86_64 = 0xC000003E
X32_SYSCALL_BIT = 0x40000000
CLONE_NEWUSER = 0x10000000
NR = {"shmget": 29, "clone": 56, "unshare": 272, "setns": 308, "memfd_create": 319, "clone3": 435,
      "memfd_secret": 447}

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h)
LD_W_ABS = 0x20
JEQ_K, JGE_K, JSET_K = 0x15, 0x35, 0x45
RET_K = 0x06
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000


def _ins(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program() -> bytes | None:
    """The filter as bytes (an array of struct sock_filter), or None where it is not written (not x86-64)."""
    if platform.machine() not in ("x86_64", "AMD64"):
        return None
    eperm, enosys = RET_ERRNO | errno.EPERM, RET_ERRNO | errno.ENOSYS
    denied = ("memfd_create", "memfd_secret", "shmget", "setns")
    # Layout (indices): 0 ld arch; 1 jeq x86_64; 2 ld nr; 3 jge x32; 4.. jeq denied; then clone3, unshare, clone;
    # then ret allow; check_flags: ld args[0]; jset NEWUSER; ret allow; ret eperm; ret enosys.
    body = [("ld", 4), ("arch",), ("ld", 0), ("x32",)] + [("deny", n) for n in denied] + \
        [("nosys", "clone3"), ("flags", "unshare"), ("flags", "clone"), ("allow",),
         ("ld", 16), ("jset",), ("allow",), ("ret_eperm",), ("ret_enosys",)]
    at = {name: i for i, name in enumerate(b[0] for b in body) if name in ("ret_eperm", "ret_enosys")}
    check_flags = len(body) - 5
    out = []
    for i, item in enumerate(body):
        def to(target):
            return target - i - 1
        kind = item[0]
        if kind == "ld":
            out.append(_ins(LD_W_ABS, item[1]))
        elif kind == "arch":
            out.append(_ins(JEQ_K, AUDIT_ARCH_X86_64, 0, to(at["ret_enosys"])))
        elif kind == "x32":
            out.append(_ins(JGE_K, X32_SYSCALL_BIT, to(at["ret_enosys"]), 0))
        elif kind == "deny":
            out.append(_ins(JEQ_K, NR[item[1]], to(at["ret_eperm"]), 0))
        elif kind == "nosys":
            out.append(_ins(JEQ_K, NR[item[1]], to(at["ret_enosys"]), 0))
        elif kind == "flags":
            out.append(_ins(JEQ_K, NR[item[1]], to(check_flags), 0))
        elif kind == "jset":
            out.append(_ins(JSET_K, CLONE_NEWUSER, to(at["ret_eperm"]), 0))
        elif kind == "allow":
            out.append(_ins(RET_K, RET_ALLOW))
        elif kind == "ret_eperm":
            out.append(_ins(RET_K, eperm))
        elif kind == "ret_enosys":
            out.append(_ins(RET_K, enosys))
    return b"".join(out)
