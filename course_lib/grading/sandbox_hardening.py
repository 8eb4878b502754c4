"""The limits the sandbox's worker puts on itself before student code runs: rlimits, prctl, seccomp.

Like ``sandbox_worker.py`` this file must not import course_lib (nor anything outside the
standard library): the worker runs as a plain script inside the sandbox and loads it by
path from its own folder (``/grader/`` under bubblewrap, where both are bound read-only).

* :func:`set_limits`: address space, file size, open files, CPU time, core files, POSIX
  message queues (``RLIMIT_*``); :func:`set_nproc`: the process limit;
* :func:`prctl_hardening`: without bubblewrap, no new privileges, not dumpable, killed with
  the zygote;
* :func:`install_seccomp` (:func:`seccomp_program`): a filter refusing SysV shared memory,
  memfd and new namespaces.
"""

from __future__ import annotations

import os

__all__ = ["set_limits", "set_nproc", "prctl_hardening", "seccomp_program", "install_seccomp"]


def set_limits(limits: dict) -> list[str]:
    import resource
    import signal

    warnings = []
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a too-large file write fails instead of killing us
    table = {
        "memory_mb": (resource.RLIMIT_AS, lambda v: int(v) * 2**20),
        "fsize_mb": (resource.RLIMIT_FSIZE, lambda v: int(v) * 2**20),
        "nofile": (resource.RLIMIT_NOFILE, int),
        "cpu_s": (resource.RLIMIT_CPU, int),
        "core": (resource.RLIMIT_CORE, int),
        "msgqueue": (resource.RLIMIT_MSGQUEUE, int),
    }
    for key, (res, conv) in table.items():
        if key in limits and limits[key] is not None:
            value = conv(limits[key])
            try:
                resource.setrlimit(res, (value, value))
            except (ValueError, OSError) as exc:
                warnings.append(f"could not set {key}={limits[key]}: {exc}")
    return warnings


def set_nproc(nproc: int, *, relative: bool) -> list[str]:
    import resource

    if relative:  # not root: the limit counts every task (process or thread) of this user
        uid = os.getuid()
        if not os.path.isdir("/proc"):
            nproc += 1024  # no /proc to count them: a loose bound
        for pid in os.listdir("/proc") if os.path.isdir("/proc") else []:
            if not pid.isdigit():
                continue
            try:
                if os.stat(f"/proc/{pid}").st_uid == uid:
                    nproc += len(os.listdir(f"/proc/{pid}/task"))
            except OSError:
                pass
    try:
        resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
    except (ValueError, OSError) as exc:
        return [f"could not limit the number of processes: {exc}"]
    return []


def prctl_hardening() -> list[str]:
    """No new privileges, and die with the parent (the sandbox's own job in bubblewrap)."""
    import ctypes
    import signal

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
        libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
    except Exception as exc:
        return [f"prctl hardening unavailable: {exc}"]
    return []


# System calls the student's process may not make (seccomp): the memory that rlimits do not
# see (SysV shared memory, message queues and semaphores; memfd; a tmpfs mounted in a new user
# and mount namespace), new namespaces of any kind, and reading or writing other processes'
# memory (the zygote runs as the same user). Their numbers on each architecture, one column
# per entry of _SECCOMP_ARCHES.
_DENIED_SYSCALLS = {
    #                   x86_64  aarch64
    "shmget": (29, 194),
    "semget": (64, 190),
    "msgget": (68, 186),
    "ptrace": (101, 117),
    "pivot_root": (155, 41),
    "mount": (165, 40),
    "umount2": (166, 39),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "keyctl": (250, 219),
    "unshare": (272, 97),
    "perf_event_open": (298, 241),
    "setns": (308, 268),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "memfd_create": (319, 279),
    "bpf": (321, 280),
    "userfaultfd": (323, 282),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "mount_setattr": (442, 442),
}
# the architectures (platform.machine()) in the order of the table's columns: the audit
# architecture seccomp checks first, and the number of clone (whose flags the filter reads)
_SECCOMP_ARCHES = {"x86_64": (0xC000003E, 56), "aarch64": (0xC00000B7, 220)}


_CLONE3 = 435
_CLONE_NEW_NAMESPACES = 0x7E020000  # CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET


def seccomp_program(machine: str) -> bytes | None:
    """The classic-BPF seccomp filter for ``machine`` (``platform.machine()``), or None."""
    import errno
    import struct

    if machine not in _SECCOMP_ARCHES:
        return None
    arch, clone_nr = _SECCOMP_ARCHES[machine]
    column = list(_SECCOMP_ARCHES).index(machine)
    denied = sorted(numbers[column] for numbers in _DENIED_SYSCALLS.values())
    ld, jeq, jge, and_, ret = 0x20, 0x15, 0x35, 0x54, 0x06
    allow, eperm, enosys = 0x7FFF0000, 0x00050000 | errno.EPERM, 0x00050000 | errno.ENOSYS
    prog = [(ld, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, eperm), (ld, 0, 0, 0)]
    if machine == "x86_64":  # the x32 ABI's numbers: refused
        prog += [(jge, 0, 1, 0x40000000), (ret, 0, 0, eperm)]
    for nr in denied:
        prog += [(jeq, 0, 1, nr), (ret, 0, 0, eperm)]
    prog += [
        (jeq, 0, 1, _CLONE3),
        (ret, 0, 0, enosys),
    ]  # C libraries fall back to clone, whose flags we can see
    prog += [
        (jeq, 0, 4, clone_nr),
        (ld, 0, 0, 16),
        (and_, 0, 0, _CLONE_NEW_NAMESPACES),
        (jeq, 1, 0, 0),
        (ret, 0, 0, eperm),
    ]
    prog += [(ret, 0, 0, allow)]
    return b"".join(struct.pack("=HBBI", *ins) for ins in prog)


def install_seccomp() -> list[str]:
    import ctypes
    import platform

    program = seccomp_program(platform.machine())
    if program is None:
        return [
            f"no seccomp filter for {platform.machine()}: SysV shared memory, memfd and new namespaces are not blocked"
        ]

    class _Prog(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        buf = ctypes.create_string_buffer(program, len(program))
        prog = _Prog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
        if libc.prctl(22, 2, ctypes.byref(prog), 0, 0) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
            raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    except Exception as exc:
        return [
            f"could not install the seccomp filter ({exc}): SysV shared memory, memfd and new namespaces are not blocked"
        ]
    return []
