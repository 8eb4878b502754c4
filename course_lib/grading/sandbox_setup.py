"""What a :class:`~course_lib.grading.sandbox.Sandbox` is started with: the mode, the bubblewrap command line, the paths it binds.

:func:`bwrap_status` tries bubblewrap once per executable (a user namespace may be refused
here); :func:`choose_mode` turns the requested mode into ``"bwrap"`` or ``"none"`` (or
refuses, :data:`NO_SANDBOX`); :func:`python_paths` and :func:`needed_dirs` are the
directories the worker imports torch from, bound read-only; :func:`bwrap_command` is the
``bwrap ...`` prefix of the worker's command (namespaces, environment, binds, the private
``/tmp``); :func:`unreadable_for_others` finds a folder a fresh uid could not read;
:func:`shim_sources` are the stand-in modules the worker installs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

__all__ = [
    "NO_SANDBOX",
    "FALLBACK_WARNING",
    "WORKER_ENV",
    "is_root",
    "bwrap_status",
    "choose_mode",
    "unreadable_for_others",
    "shim_sources",
    "python_paths",
    "needed_dirs",
    "bwrap_command",
]


NO_SANDBOX = (
    "no working sandbox here ({reason}), so student code would run as you, with your files and network: "
    "nothing was graded. Install bubblewrap (`make system-deps`, or `apt-get install bubblewrap`), or pass "
    "`--sandbox none` (or COURSE_GRADER_SANDBOX=none) to accept that risk explicitly"
)


FALLBACK_WARNING = (
    "bubblewrap (bwrap) is not usable here{reason}: student code runs in a separate process with "
    "resource limits only. It can read any file the grading user can read and can use the network. "
    "Install bubblewrap (e.g. `apt-get install bubblewrap`) for a real sandbox."
)


# the worker's environment in both modes (besides PATH, and HOME/TMPDIR): one thread per
# library, a fixed hash seed, no display
WORKER_ENV = {
    "LANG": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "PYTHONHASHSEED": "0",
    "MPLBACKEND": "Agg",
}
_BWRAP_CACHE: dict[str, tuple[bool, str]] = {}


def is_root() -> bool:
    return hasattr(os, "geteuid") and os.geteuid() == 0


def _disable_userns(exe: str) -> bool:
    """Whether this bubblewrap has ``--disable-userns`` (0.8+) and it works here."""
    key = "disable-userns"
    if key not in _BWRAP_CACHE:
        try:
            help_text = subprocess.run([exe, "--help"], capture_output=True, text=True, timeout=20).stdout
        except (OSError, subprocess.TimeoutExpired):
            help_text = ""
        _BWRAP_CACHE[key] = ("--disable-userns" in help_text, "")
    return _BWRAP_CACHE[key][0]


def bwrap_status() -> tuple[bool, str]:
    """Whether bubblewrap works here with the options the sandbox needs: ``(ok, reason)``."""
    if "status" in _BWRAP_CACHE:
        return _BWRAP_CACHE["status"]
    exe = shutil.which("bwrap")
    if exe is None:
        result = (False, "bwrap is not installed")
    else:
        cmd = bwrap_command(exe, tmpfs_mb=1) + ["--", "/bin/true" if os.path.exists("/bin/true") else "true"]
        try:
            proc = subprocess.run(cmd, capture_output=True, timeout=20)
            if proc.returncode != 0 and "--disable-userns" in cmd:  # supported, but not on this kernel
                _BWRAP_CACHE["disable-userns"] = (False, "")
                cmd = bwrap_command(exe, tmpfs_mb=1) + [
                    "--",
                    "/bin/true" if os.path.exists("/bin/true") else "true",
                ]
                proc = subprocess.run(cmd, capture_output=True, timeout=20)
            ok = proc.returncode == 0
            result = (
                ok,
                ""
                if ok
                else proc.stderr.decode(errors="replace").strip()[:300] or f"exit status {proc.returncode}",
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            result = (False, str(exc))
    _BWRAP_CACHE["status"] = result
    return result


def choose_mode(requested: str | None = None) -> tuple[str, str | None]:
    """``requested``: "auto" (default; also ``$COURSE_GRADER_SANDBOX``), "bwrap" or "none".

    Returns ``(mode, warning or None)``. Safe by default: raises RuntimeError (naming the fix)
    when bubblewrap is unusable, unless "none" was asked for explicitly.
    """
    requested = (requested or os.environ.get("COURSE_GRADER_SANDBOX") or "auto").lower()
    if requested not in ("auto", "bwrap", "none"):
        raise RuntimeError(f"unknown sandbox {requested!r}: use auto, bwrap or none")
    if requested == "none":
        return "none", FALLBACK_WARNING.format(
            reason=" (turned off: --sandbox none / COURSE_GRADER_SANDBOX=none)"
        )
    ok, reason = bwrap_status()
    if ok:
        return "bwrap", None
    if requested == "bwrap":
        raise RuntimeError(f"--sandbox bwrap was requested but bubblewrap does not work here: {reason}")
    raise RuntimeError(NO_SANDBOX.format(reason=reason))


def unreadable_for_others(paths: list[str] | None = None, *, bound: list[str] | None = None) -> str | None:
    """The first folder on the way to the interpreter or its import path that a user other
    than its owner cannot enter (e.g. ``/root`` with mode 700, where pyenv installs Python
    for root), as ``"path (mode 700)"``; None when every folder can be entered. The student
    process runs under a fresh unprivileged uid when the grader runs as root, and then cannot
    read such an interpreter. ``bound``: folders bubblewrap binds as they are (the folders
    above them are made afresh, open to all), so only the way from them down counts."""
    wanted = [
        os.path.realpath(sys.executable),
        os.path.realpath(sys.base_prefix),
        os.path.realpath(sys.prefix),
    ]
    wanted += paths if paths is not None else python_paths()
    seen: set[str] = set()
    for target in wanted:
        parts = Path(target).parts
        first = 1
        for b in bound or ():
            if target == b or target.startswith(b.rstrip("/") + "/"):
                first = max(first, len(Path(b).parts))
        for i in range(first, len(parts) + 1):
            d = str(Path(*parts[:i]))
            if d in seen:
                continue
            seen.add(d)
            try:
                st = os.stat(d)
            except OSError:
                break
            if not os.path.isdir(d):
                if not st.st_mode & 0o004:
                    return f"{d} (mode {st.st_mode & 0o777:o})"
                break
            if not st.st_mode & 0o001:
                return f"{d} (mode {st.st_mode & 0o777:o})"
    return None


def shim_sources() -> dict[str, str]:
    """The course_lib helpers importable inside graded answers (the exercise texts recommend
    them for testing): module name -> source, run in the student's process in place of the
    real module, which the sandbox cannot see."""
    import inspect

    from . import checks

    header = "from __future__ import annotations\n\nfrom contextlib import contextmanager\n\n__all__ = ['raises']\n\n\n"
    return {"course_lib.grading.checks": header + inspect.getsource(checks.raises)}


def python_paths() -> list[str]:
    """The import path for the worker: the standard library and site directories, minus any
    folder that holds course_lib's sources (an editable checkout, a PYTHONPATH entry)."""
    paths: list[str] = []
    cwd = os.path.realpath(os.getcwd())
    for entry in sys.path:
        if not entry or not os.path.exists(entry):
            continue
        real = os.path.realpath(entry)
        is_site = "site-packages" in real or "dist-packages" in real
        if not is_site and (real == cwd or os.path.isdir(os.path.join(real, "course_lib"))):
            continue
        if real not in paths:
            paths.append(real)
    return paths


def needed_dirs(paths: list[str]) -> list[str]:
    """Host directories the worker must see: Python itself, the venv and the import path."""
    wanted = {os.path.realpath(sys.base_prefix), os.path.realpath(sys.prefix), sys.prefix}
    wanted.add(os.path.dirname(os.path.realpath(sys.executable)))
    wanted.add(os.path.dirname(sys.executable))
    for key in ("stdlib", "platstdlib", "purelib", "platlib"):
        p = sysconfig.get_paths().get(key)
        if p and os.path.exists(p):
            wanted.add(os.path.realpath(p))
    for p in paths:
        wanted.add(p if os.path.isdir(p) else os.path.dirname(p))
    return sorted(w for w in wanted if w and os.path.exists(w))


_SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")


def bwrap_command(
    exe: str, *, tmpfs_mb: int, extra_dirs: list[str] = (), worker: str | None = None
) -> list[str]:
    cmd = [exe, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
    if is_root():
        cmd += ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        cmd += ["--unshare-user"]
        if _disable_userns(exe):  # no nested user namespaces (the seccomp filter refuses them too)
            cmd += ["--disable-userns"]
    cmd += ["--die-with-parent", "--new-session", "--clearenv"]
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp", **WORKER_ENV}
    for k, v in env.items():
        cmd += ["--setenv", k, v]
    bound: list[str] = []
    for d in _SYSTEM:
        if os.path.islink(d):
            cmd += ["--symlink", os.readlink(d), d]
            bound.append(d)
        elif os.path.isdir(d):
            cmd += ["--ro-bind", d, d]
            bound.append(d)

    def covered(p: str) -> bool:
        return any(p == b or p.startswith(b.rstrip("/") + "/") for b in bound)

    # /proc, /dev and the private /tmp first: binds that follow may live below /tmp (a
    # checkout and its venv in /tmp/...), and a later tmpfs would hide them
    cmd += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(tmpfs_mb * 2**20),
        "--tmpfs",
        "/tmp",
    ]
    made: set[str] = {"/tmp", "/proc", "/dev"}
    for d in sorted(set(extra_dirs)):
        if covered(d) or d in made:
            continue
        parts = Path(d).parts
        for i in range(2, len(parts)):
            parent = str(Path(*parts[:i]))
            if parent not in made and not covered(parent):
                cmd += ["--perms", "0755", "--dir", parent]
                made.add(parent)
        cmd += ["--ro-bind", d, d]
        bound.append(d)
    if worker:
        # the worker script and the module of limits it loads from its own folder
        hardening = str(Path(worker).with_name("sandbox_hardening.py"))
        cmd += ["--perms", "0755", "--dir", "/grader", "--ro-bind", worker, "/grader/worker.py"]
        cmd += ["--ro-bind", hardening, "/grader/sandbox_hardening.py"]
    cmd += ["--chdir", "/tmp"]
    return cmd
