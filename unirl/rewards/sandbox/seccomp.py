"""The seccomp filter every sandboxed program runs under, compiled with libseccomp (through ctypes).

A deny-list on top of "allow": the namespaces, the read-only allow-listed root and the cgroup already confine
the program; this filter closes the kernel interfaces that reach *host* state regardless of namespaces
(keyrings, pathname unix sockets, locks and watches on host files, vsock), the ones that undo the sandbox
(mount, unshare, setns, namespace flags of clone, ptrace) and the large kernel attack surfaces a test program
never needs (bpf, perf, userfaultfd, io_uring, module and kexec loading). The program gets an ordinary error
(EPERM, ENOLCK or ENOSYS), never a silent success. Syscalls of a foreign ABI (32-bit ``int 0x80``, x32) kill the
process: the deny-list is written for the native ABI only.

bwrap loads the compiled program (``--seccomp FD``) as the very last step before exec, after its own setup.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import os
from collections.abc import Iterable
from dataclasses import dataclass

from unirl.errors import UnirlError

_LIBRARY = "libseccomp.so.2"
_ACT_ALLOW = 0x7FFF0000
_ACT_KILL_PROCESS = 0x80000000
_ATTR_ACT_BADARCH = 2
_CMP_MASKED_EQ = 7


def _errno(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)


class SeccompUnavailable(UnirlError):
    """libseccomp is missing or refused to build the filter."""


@dataclass(frozen=True)
class Rule:
    syscall: str
    errno: int
    why: str
    arg: tuple[int, int, int, int] | None = None  # (argument index, comparison, datum_a, datum_b)


def _low32(index: int, value: int) -> tuple[int, int, int, int]:
    # The kernel reads int arguments (socket's family, fcntl's command) from the low 32 bits of the register;
    # a plain 64-bit comparison would let garbage in the high bits slip past the rule.
    return (index, _CMP_MASKED_EQ, 0xFFFFFFFF, value)


def _rules(deny_memfd: bool) -> list[Rule]:
    perm, nosys = errno.EPERM, errno.ENOSYS
    rules = [Rule(name, perm, "kernel keyrings are shared with the host") for name in
             ("keyctl", "add_key", "request_key")]
    rules += [Rule(name, perm, "mounts would undo the read-only allow-listed root") for name in
              ("mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
               "fsmount", "fspick", "mount_setattr")]
    rules += [Rule(name, perm, "new namespaces would escape the run's limits") for name in ("unshare", "setns")]
    # clone3 passes its flags in memory seccomp cannot read; ENOSYS makes glibc fall back to clone(), whose
    # flags are a register the rules below can check.
    rules.append(Rule("clone3", nosys, "its flags are not inspectable; glibc falls back to clone"))
    for flag in (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000, 0x40000000):
        rules.append(Rule("clone", perm, "clone with a namespace flag", (0, _CMP_MASKED_EQ, flag, flag)))
    # The program is PID 1 of its namespace and dies with bwrap through its parent-death signal; clearing that
    # signal would let it outlive the host process.
    rules.append(Rule("prctl", perm, "the parent-death signal ties the run to its host", _low32(0, 1)))
    rules += [Rule(name, perm, "reading or steering other processes") for name in
              ("ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd")]
    rules += [Rule(name, perm, "large kernel attack surface a test program never needs") for name in
              ("bpf", "perf_event_open", "userfaultfd", "kexec_load", "kexec_file_load", "init_module",
               "finit_module", "delete_module", "reboot", "swapon", "swapoff", "acct", "quotactl", "quotactl_fd",
               "lookup_dcookie", "syslog", "vhangup", "open_by_handle_at", "modify_ldt", "iopl", "ioperm",
               "settimeofday", "clock_settime", "clock_adjtime", "adjtimex", "memfd_secret")]
    # io_uring runs its operations in kernel threads that no seccomp filter sees.
    rules += [Rule(name, nosys, "io_uring operations bypass seccomp") for name in
              ("io_uring_setup", "io_uring_enter", "io_uring_register")]
    # A lock taken on a readable host file blocks host writers; watches report host activity.
    rules.append(Rule("flock", errno.ENOLCK, "locks on host files block host writers"))
    for command in (6, 7, 37, 38):  # F_SETLK, F_SETLKW, F_OFD_SETLK, F_OFD_SETLKW
        rules.append(Rule("fcntl", errno.ENOLCK, "locks on host files block host writers", _low32(1, command)))
    for command in (1024, 1026):  # F_SETLEASE, F_NOTIFY (dnotify)
        rules.append(Rule("fcntl", perm, "leases and directory notifications on host files", _low32(1, command)))
    rules += [Rule(name, perm, "watches on host directories") for name in
              ("inotify_init", "inotify_init1", "inotify_add_watch", "fanotify_init", "fanotify_mark")]
    # Sockets: the network namespace isolates AF_INET/AF_INET6/AF_NETLINK; every other family either reaches
    # host objects (a world-writable AF_UNIX socket on a visible path, vsock to the hypervisor) or is kernel
    # surface nobody needs. socketpair() stays allowed: it creates a connected pair and reaches nothing.
    for family in range(1, 46):  # AF_UNIX .. AF_MCTP; larger values are EAFNOSUPPORT already
        if family not in (2, 10, 16):
            rules.append(Rule("socket", perm, "socket families that reach host objects", _low32(0, family)))
    # A run cannot make itself look starved (which would turn its timeout into an infrastructure error).
    rules += [Rule(name, perm, "a run may not lower its own scheduling priority") for name in
              ("setpriority", "sched_setscheduler", "sched_setattr", "sched_setparam")]
    if deny_memfd:
        # Without a memory cgroup nothing charges these pages to the run; with one, the cgroup bounds them.
        rules += [Rule(name, perm, "unbounded memory outside the address-space limit") for name in
                  ("memfd_create", "shmget")]
    return rules


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


@functools.cache
def _library() -> ctypes.CDLL:
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("seccomp") or _LIBRARY, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(f"cannot load libseccomp ({exc}); install it: apt-get install libseccomp2 "
                                 "(Debian/Ubuntu) or dnf install libseccomp (Fedora)") from exc
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    lib.seccomp_attr_set.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                           ctypes.POINTER(_ArgCmp)]
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    return lib


def _check(result: int, what: str) -> None:
    if result < 0:
        raise SeccompUnavailable(f"libseccomp: {what}: {os.strerror(-result)}")


@functools.cache
def filter_program(deny_memfd: bool) -> bytes:
    """The compiled BPF program (``struct sock_filter[]``) for bwrap's ``--seccomp``; built once per process."""
    lib = _library()
    ctx = lib.seccomp_init(_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("libseccomp: seccomp_init failed")
    try:
        _check(lib.seccomp_attr_set(ctx, _ATTR_ACT_BADARCH, _ACT_KILL_PROCESS), "set the foreign-ABI action")
        for rule in _rules(deny_memfd):
            number = lib.seccomp_syscall_resolve_name(rule.syscall.encode())
            if number < 0:
                continue  # not a syscall on this architecture (nothing to deny)
            if rule.arg is None:
                _check(lib.seccomp_rule_add_array(ctx, _errno(rule.errno), number, 0, None), rule.syscall)
            else:
                index, op, a, b = rule.arg
                cmp = _ArgCmp(index, op, a, b)
                _check(lib.seccomp_rule_add_array(ctx, _errno(rule.errno), number, 1, ctypes.byref(cmp)),
                       rule.syscall)
        # Exported through a memfd: libseccomp writes to a file descriptor, and nothing touches the disk.
        fd = os.memfd_create("unirl-seccomp", os.MFD_CLOEXEC)
        try:
            _check(lib.seccomp_export_bpf(ctx, fd), "export the filter")
            size = os.lseek(fd, 0, os.SEEK_END)
            return os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)


def denied_syscalls(deny_memfd: bool) -> list[str]:
    """Every syscall the filter touches (fully or for some arguments), for ``SandboxResult.isolation``."""
    return _unique(rule.syscall for rule in _rules(deny_memfd))


def _unique(names: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(names))
