"""Run student code in a separate, limited process: bubblewrap where it works, else rlimits.

One :class:`Sandbox` serves one submission. It starts ``sandbox_worker.py``, which imports
torch, sets the limits, drops privileges and then waits as a *zygote*: the student's code
runs in a process forked from it (:meth:`Sandbox.spawn`). The checker sends that process
requests (run this answer cell, call this function with these arguments) and waits for
each answer with a deadline; what the student prints is read from a separate pipe and kept
up to a limit. When the student process crashes or runs out of time, the zygote kills it
and everything it started, and the next check gets a fresh fork in milliseconds instead of
a new sandbox (about 1.5 s of torch import).

Isolation, with bubblewrap (``mode="bwrap"``):

* a new mount namespace that holds only the system directories, the Python installation
  and the directories torch is imported from, all read-only, and an empty size-limited
  tmpfs as working directory: no solutions, no other submissions, no grade folder;
* new network (no network at all), PID, IPC and UTS namespaces; the sandbox dies with
  the checker (``--die-with-parent``), and killing it ends every process inside;
* when the grader runs as root, the student code runs under a fresh unprivileged uid
  (after the worker imported torch), so that the process limit applies and nothing it
  starts can signal the grader.

Both modes set rlimits in the worker before student code runs: address space (memory),
number of processes, file size, open files, CPU time, no core files; and the checker
enforces wall-clock deadlines, kills the whole process group on a timeout, and (as root)
kills every process left under the sandbox's uid. Without bubblewrap (``mode="none"``) the
student code can read what the grading user can read and can reach the network: the
grader says so in a warning.
"""

from __future__ import annotations

import errno
import os
import secrets
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .sandbox_setup import WORKER_ENV, bwrap_command, is_root, needed_dirs, python_paths, shim_sources
from .wire import MAX_LINE, ProtocolError, parse_response

__all__ = [
    "SandboxLimits",
    "Sandbox",
    "SandboxLost",
    "Outcome",
]

WORKER = Path(__file__).with_name("sandbox_worker.py")
OUTPUT_KEEP = 8192  # bytes of printed output kept per request
PRELOAD = [
    "torch", "torch.nn", "torch.nn.functional", "numpy", "math", "cmath", "random", "itertools",
    "functools", "collections", "dataclasses", "typing", "copy", "operator", "string", "re", "json",
    "time", "warnings", "traceback", "statistics", "fractions", "decimal", "textwrap", "enum",
    "contextlib", "inspect", "subprocess", "threading", "signal", "heapq", "bisect", "struct",
]  # fmt: skip


@dataclass
class SandboxLimits:
    memory_mb: int = 2048  # address space of the student's process (torch alone maps ~0.6 GB)
    nproc: int = 32  # processes and threads under the sandbox's uid
    fsize_mb: int = 16  # largest file it may write
    tmpfs_mb: int = 64  # the sandbox's /tmp (bubblewrap only)
    nofile: int = 256
    cpu_s: int = 600  # CPU seconds of the process (a backstop; wall-clock deadlines come first)
    grader_memory_mb: int = (
        2048  # address space of the checker process, where check code runs on the student's values
    )
    # megabytes a check's own code and the reference answers may add to the checker while they
    # work on the student's values (a huge id fed to ``bincount``, a shape that broadcasts to a
    # huge tensor): an allocation past it fails that check only
    check_memory_mb: int = 512


class SandboxLost(Exception):
    """The sandbox stopped answering: timeout, process ended, or a broken response."""

    def __init__(self, kind: str, reason: str):
        super().__init__(reason)
        self.kind = kind  # "timeout" | "exit" | "protocol" | "start"
        self.reason = reason
        self.before_request = False  # "exit": the process ended before it read any of the request


@dataclass
class Outcome:
    ok: bool
    value: dict | None = None  # schema-valid encoded value (ok)
    error: dict | None = None  # {"type", "mro", "message", "traceback"} (not ok)
    output: str = ""
    output_dropped: int = 0
    mutated: list = field(default_factory=list)  # [[argument index or name, encoded value now], ...]
    interrupted: bool = False  # it ran past its deadline and was interrupted (KeyboardInterrupt)


def _pids_of_uid(uid: int) -> list[int]:
    pids = []
    for name in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/status") as fh:
                state = uid_ok = None
                for line in fh:
                    if line.startswith("State:"):
                        state = line.split()[1]
                    elif line.startswith("Uid:"):
                        uid_ok = uid in (int(x) for x in line.split()[1:])
                        break
            if uid_ok and state != "Z":
                pids.append(int(name))
        except (OSError, ValueError):
            pass
    return pids


def kill_uid(uid: int) -> bool:
    """Kill every process running as ``uid`` (root only; the uid is the sandbox's own)."""
    for _ in range(50):
        if not _pids_of_uid(uid):
            return True
        pid = os.fork()
        if pid == 0:  # pragma: no cover - child
            try:
                os.setresuid(uid, uid, uid)
                os.kill(-1, signal.SIGKILL)
            finally:
                os._exit(0)
        os.waitpid(pid, 0)
        time.sleep(0.01)
    return not _pids_of_uid(uid)


def _children_of(pid: int) -> list[int]:
    kids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as fh:
                    stat = fh.read()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    kids.append(int(name))
            except (OSError, ValueError, IndexError):
                pass
    return kids


def kill_orphans() -> None:
    """Kill and reap processes re-parented to this process (it is a child subreaper)."""
    if not os.path.isdir("/proc"):
        return
    for _ in range(20):
        kids = _children_of(os.getpid())
        for k in kids:
            try:
                os.kill(k, signal.SIGKILL)
            except ProcessLookupError:
                pass
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
        if not kids:
            return
        time.sleep(0.01)


def become_subreaper() -> bool:
    """Orphans of the sandbox (double-forked daemons) are re-parented to us, so we can kill them."""
    try:
        import ctypes

        return ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
    except Exception:
        return False


def _fresh_uid() -> int:
    for _ in range(20):
        uid = 200_000 + secrets.randbelow(1_000_000)
        if not _pids_of_uid(uid):
            return uid
    return uid


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


@dataclass
class Sandbox:
    """One submission's sandbox: a zygote process (torch imported, limits set) that forks the
    student process on :meth:`spawn`. A crash or a timeout ends only the student process;
    :meth:`spawn` then starts a fresh one in milliseconds."""

    mode: str  # "bwrap" or "none"
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    forbid: tuple[str, ...] = ()
    warnings: list[str] = field(default_factory=list)

    proc: subprocess.Popen | None = field(default=None, init=False, repr=False)
    child_alive: bool = field(default=False, init=False)

    def start(self, deadline: float) -> None:
        """Start the sandbox and its zygote, then the first student process."""
        self._next_id = 0
        self._resp = bytearray()
        self._ctl = bytearray()
        self._out = bytearray()
        self._out_dropped = 0
        self._tmpdir = None
        self._resp_fd = self._out_fd = self._ctl_fd = None
        self.uid = _fresh_uid() if is_root() else None
        paths = python_paths()
        req_r, req_w = os.pipe()
        resp_r, resp_w = os.pipe()
        ctl_in_r, ctl_in_w = os.pipe()
        ctl_out_r, ctl_out_w = os.pipe()
        out_r, out_w = os.pipe()
        child_fds = (req_r, resp_w, ctl_in_r, ctl_out_w)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **WORKER_ENV}
        python = sys.executable
        fd_args = [str(fd) for fd in child_fds]
        if self.mode == "bwrap":
            cmd = bwrap_command(
                shutil.which("bwrap"),
                tmpfs_mb=self.limits.tmpfs_mb,
                extra_dirs=needed_dirs(paths),
                worker=str(WORKER),
            )
            cmd += ["--", python, "-I", "-S", "-u", "-B", "/grader/worker.py", *fd_args]
            cwd = None
        else:
            self._tmpdir = tempfile.mkdtemp(prefix="course-grade-")
            if self.uid is not None:
                os.chown(self._tmpdir, self.uid, self.uid)
            env["HOME"] = env["TMPDIR"] = self._tmpdir
            cmd = [python, "-I", "-S", "-u", "-B", str(WORKER), *fd_args]
            cwd = self._tmpdir
        try:
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out_w,
                stderr=out_w,
                pass_fds=child_fds,
                cwd=cwd,
                env=env,
                start_new_session=True,
            )
        except OSError as exc:
            for fd in (req_r, req_w, resp_r, resp_w, ctl_in_r, ctl_in_w, ctl_out_r, ctl_out_w, out_r, out_w):
                os.close(fd)
            raise SandboxLost("start", f"could not start the sandbox: {exc}") from None
        for fd in (*child_fds, out_w):
            os.close(fd)
        self._req = os.fdopen(req_w, "wb")
        self._ctl_in = os.fdopen(ctl_in_w, "wb")
        self._resp_fd, self._ctl_fd, self._out_fd = resp_r, ctl_out_r, out_r
        os.set_blocking(out_r, False)
        init = {
            "op": "init",
            "sys_path": paths,
            "preload": PRELOAD,
            "forbid": list(self.forbid),
            "shims": shim_sources(),
            "uid": self.uid,
            "nice": 5,
            "prctl": self.mode != "bwrap",
            "sweep": self.mode == "bwrap",  # a PID namespace of its own
            "limits": {
                "memory_mb": self.limits.memory_mb,
                "nproc": self.limits.nproc,
                "fsize_mb": self.limits.fsize_mb,
                "nofile": self.limits.nofile,
                "cpu_s": self.limits.cpu_s,
                "core": 0,
                "msgqueue": 0,  # POSIX message queues hold memory no rlimit on the process sees
            },
        }
        self._write(self._ctl_in, init)
        try:
            ready = self._wait_ctl(deadline)
        except SandboxLost as exc:
            code = self.proc.poll()
            why = f"exit status {code}" if code is not None else exc.reason
            out = self._take_output()[0].strip()
            self.kill()
            raise SandboxLost(
                exc.kind if exc.kind == "timeout" else "start",
                f"the sandbox did not start ({why}){': ' + out[-500:] if out else ''}",
            ) from None
        self._take_output()
        self.warnings = list(ready.get("warnings", []))
        self.spawn(deadline)

    def spawn(self, deadline: float) -> None:
        """Fork a fresh student process from the zygote and wait until it is ready."""
        if not self.alive:
            raise SandboxLost("exit", "the sandbox is not running")
        self._discard_responses()
        self._write(self._ctl_in, {"op": "spawn"})
        self._next_id = 0
        self.child_alive = True
        try:
            self._wait(0, deadline)
        except SandboxLost as exc:
            self.child_alive = False
            raise SandboxLost(exc.kind, f"the student process did not start ({exc.reason})") from None
        self._take_output()
        self._next_id = 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None and self._ctl_fd is not None

    def _write(self, f, obj: dict) -> None:
        import json

        try:
            f.write(json.dumps(obj).encode() + b"\n")
            f.flush()
        except (BrokenPipeError, OSError, ValueError, AttributeError):
            pass  # the process is gone; _wait reports how it ended

    def _send(self, obj: dict, deadline: float) -> None:
        """Write a request without ever blocking: a student process that ended (or stopped
        reading) cannot hold the grader; what it left unread is dropped by the zygote
        before the next student process starts."""
        import json

        data = memoryview(json.dumps(obj).encode() + b"\n")
        fd = self._req.fileno()
        os.set_blocking(fd, False)
        sent = 0
        while sent < len(data):
            try:
                sent += os.write(fd, data[sent : sent + (1 << 20)])
                self._sent = sent
                continue
            except BlockingIOError:
                pass
            except OSError:
                return  # the reading end is gone: _wait reports how the process ended
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill_child()
                raise SandboxLost("timeout", "time limit reached")
            try:
                ready, _, _ = select.select([self._ctl_fd, self._out_fd], [fd], [], min(remaining, 1.0))
            except InterruptedError:
                continue
            if self._out_fd in ready:
                self._read_output()
            if self._ctl_fd in ready:
                self._read_control()

    def _unread_request_bytes(self) -> int:
        """Bytes of requests in the pipe that no process read (FIONREAD works on either end)."""
        try:
            import fcntl
            import struct
            import termios

            buf = fcntl.ioctl(self._req.fileno(), termios.FIONREAD, b"\0\0\0\0")
            return struct.unpack("i", buf)[0]
        except (OSError, ValueError, AttributeError, ImportError):
            return -1

    def _discard_responses(self) -> None:
        """Drop what a dead student process left in the response pipe."""
        self._resp = bytearray()
        if self._resp_fd is None:
            return
        os.set_blocking(self._resp_fd, False)
        try:
            while os.read(self._resp_fd, 1 << 20):
                pass
        except (BlockingIOError, OSError):
            pass
        finally:
            os.set_blocking(self._resp_fd, True)

    def _read_control(self) -> None:
        """Read the zygote's control pipe; raise :class:`SandboxLost` when the student's
        process (or the zygote itself) has gone, with what it printed until then."""
        chunk = os.read(self._ctl_fd, 65536)
        if not chunk:
            reason = self._zygote_gone()
            self._read_output()
            self.kill()
            raise SandboxLost("exit", reason)
        self._ctl += chunk
        msg = self._ctl_line()
        if msg is not None and msg.get("event") == "exit":
            self.child_alive = False
            self._read_output()
            raise SandboxLost("exit", self._exit_reason(int(msg.get("code", 0))))

    def _read_output(self) -> None:
        while self._out_fd is not None:
            try:
                chunk = os.read(self._out_fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                return
            if not chunk:
                return
            room = OUTPUT_KEEP - len(self._out)
            if room > 0:
                self._out += chunk[:room]
            self._out_dropped += max(0, len(chunk) - max(room, 0))

    def _take_output(self) -> tuple[str, int]:
        self._read_output()
        text = self._out.decode("utf-8", errors="replace")
        dropped = self._out_dropped
        self._out = bytearray()
        self._out_dropped = 0
        return text, dropped

    @staticmethod
    def _exit_reason(code: int) -> str:
        if code < 0:
            sig = _signal_name(-code)
            hint = " (killed: memory or process limits?)" if sig == "SIGKILL" else ""
            return f"the process running your code was ended by {sig}{hint}"
        return f"the process running your code exited (exit status {code}; os._exit() or a crash?)"

    def _ctl_line(self) -> dict | None:
        import json

        nl = self._ctl.find(b"\n")
        if nl < 0:
            return None
        line = bytes(self._ctl[:nl])
        del self._ctl[: nl + 1]
        return json.loads(line)

    def _wait_ctl(self, deadline: float) -> dict:
        """The zygote's next message (trusted until student code ran; then only exit events)."""
        while True:
            msg = self._ctl_line()
            if msg is not None:
                return msg
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxLost("timeout", "time limit reached")
            ready, _, _ = select.select([self._ctl_fd, self._out_fd], [], [], min(remaining, 1.0))
            if self._out_fd in ready:
                self._read_output()
            if self._ctl_fd in ready:
                chunk = os.read(self._ctl_fd, 65536)
                if not chunk:
                    raise SandboxLost("exit", self._zygote_gone())
                self._ctl += chunk

    def _zygote_gone(self) -> str:
        try:
            code = self.proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            code = None
        return "the sandbox running your code ended" + (
            f" (exit status {code}: killed by your code?)" if code is not None else ""
        )

    def _wait(self, rid: int, deadline: float, kill_on_timeout: bool = True) -> dict:
        out_open = True
        scanned = 0  # bytes of self._resp already searched for the end of the line
        while True:
            nl = self._resp.find(b"\n", scanned)
            scanned = len(self._resp)
            if nl >= 0:
                line = bytes(self._resp[:nl])
                del self._resp[: nl + 1]
                self._read_output()
                try:
                    resp = parse_response(line, rid)
                except ProtocolError as exc:
                    self.kill_child()
                    raise SandboxLost(
                        "protocol", f"the grader received an invalid response ({exc})"
                    ) from None
                if time.monotonic() > deadline + 1.0:  # reading and checking it counts too
                    self.kill_child()
                    raise SandboxLost("timeout", "time limit reached (while the grader read the response)")
                return resp
            if len(self._resp) > MAX_LINE:
                self.kill_child()
                raise SandboxLost("protocol", f"a response larger than {MAX_LINE // 2**20} MB")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if kill_on_timeout:
                    self.kill_child()
                raise SandboxLost("timeout", "time limit reached")
            fds = [self._resp_fd, self._ctl_fd] + ([self._out_fd] if out_open else [])
            try:
                ready, _, _ = select.select(fds, [], [], min(remaining, 1.0))
            except InterruptedError:
                continue
            if self._out_fd in ready:
                before = len(self._out) + self._out_dropped
                self._read_output()
                if len(self._out) + self._out_dropped == before:
                    try:  # EOF on the output pipe: stop watching it
                        if os.read(self._out_fd, 1) == b"":
                            out_open = False
                    except BlockingIOError:
                        pass
                    except OSError:
                        out_open = False
            if self._ctl_fd in ready:
                self._read_control()
            if self._resp_fd in ready:
                try:
                    chunk = os.read(self._resp_fd, 1 << 20)
                except OSError as exc:
                    if exc.errno == errno.EINTR:
                        continue
                    chunk = b""
                if not chunk:  # cannot happen while the zygote holds the pipe; treat as the end
                    reason = self._zygote_gone()
                    self.kill()
                    raise SandboxLost("exit", reason)
                self._resp += chunk

    def kill_child(self) -> None:
        """End the student process (timeout, broken protocol); the zygote stays for :meth:`spawn`."""
        if not self.child_alive:
            return
        self.child_alive = False
        if not self.alive:
            self.kill()
            return
        self._write(self._ctl_in, {"op": "kill"})
        deadline = time.monotonic() + 10
        try:
            while True:
                msg = self._wait_ctl(deadline)
                if msg.get("event") == "exit":
                    return
        except SandboxLost:
            self.kill()

    def request(self, payload: dict, deadline: float, interrupt_grace: float = 0.0) -> Outcome:
        """Send one request (``op`` exec or call); raise :class:`SandboxLost` if it does not answer.

        With ``interrupt_grace``, a request still running at ``deadline`` is interrupted
        (SIGINT: KeyboardInterrupt in the student's code, as Jupyter's stop button) and has
        that many seconds to answer (``Outcome.interrupted``) before its process is killed."""
        if not self.child_alive:
            raise SandboxLost("exit", "the student process is not running")
        rid = self._next_id
        self._next_id += 1
        self._sent = 0
        interrupted = False
        try:
            self._send({**payload, "id": rid}, deadline)
            try:
                resp = self._wait(rid, deadline, kill_on_timeout=not interrupt_grace)
            except SandboxLost as exc:
                if exc.kind != "timeout" or not interrupt_grace or not self.child_alive:
                    raise
                self._write(self._ctl_in, {"op": "interrupt"})
                interrupted = True
                resp = self._wait(rid, time.monotonic() + interrupt_grace)
        except SandboxLost as exc:
            if exc.kind == "exit" and self._sent and self._unread_request_bytes() == self._sent:
                exc.before_request = True
            raise
        text, dropped = self._take_output()
        ok = bool(resp["ok"])
        return Outcome(
            ok,
            value=resp["value"] if ok else None,
            error=None if ok else resp["error"],
            output=text,
            output_dropped=dropped,
            mutated=resp.get("mutated", []),
            interrupted=interrupted,
        )

    def take_output(self) -> tuple[str, int]:
        return self._take_output() if hasattr(self, "_out") else ("", 0)

    def kill(self) -> None:
        """End the sandbox and everything it started; safe to call twice."""
        self.child_alive = False
        proc = self.proc
        if proc is None:
            return
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.kill()
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        if self.uid is not None and is_root():
            kill_uid(self.uid)
        kill_orphans()
        self._read_output()
        for f in (getattr(self, "_req", None), getattr(self, "_ctl_in", None)):
            try:
                if f is not None:
                    f.close()
            except OSError:
                pass
        for fd in (self._resp_fd, self._out_fd, self._ctl_fd):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._resp_fd = self._out_fd = self._ctl_fd = None
        self._req = self._ctl_in = None
        if self._tmpdir:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        self.proc = None

    def close(self) -> None:
        self.kill()
