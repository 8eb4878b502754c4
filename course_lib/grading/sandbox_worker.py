"""The process that runs a student's code: answer cells, then calls from the checks.

This file is run as a plain script inside the sandbox
(``python -I -S -u worker.py REQ RESP CTL_IN CTL_OUT``)
and must not import course_lib: course_lib is not available to graded answers. The checker
also imports it, for :func:`encode` and :func:`decode` (the wire format of values). The
limits it sets on itself (rlimits, prctl, seccomp) are in ``sandbox_hardening.py``, which it
loads by path from its own folder.

It imports torch, sets the limits and drops privileges, and then serves as a *zygote*: on
each "spawn" (on CTL_IN) it forks a fresh student process, which runs the requests; when
that process ends (a crash, ``os._exit``, or a "kill" after a timeout) the zygote reports
how on CTL_OUT, kills what it left behind, and can fork the next one in milliseconds.

Protocol: one JSON object per line. Requests come on file descriptor REQ, responses go to
RESP; what student code prints goes to stdout/stderr, which the checker reads separately.
Everything this process sends is untrusted: the checker validates each response against a
JSON schema, and a response can only say "this call returned this value" or "raised
this". Nothing here decides a grade.

Requests (from the checker, trusted):

* on CTL_IN: ``{"op": "init", ...}`` (paths, limits, forbidden functions; answered on
  CTL_OUT when ready), ``{"op": "spawn"}``, ``{"op": "kill"}``; CTL_OUT reports
  ``{"event": "exit", "code": n}`` (negative: killed by signal -n);
* on REQ, for the student process (which first sends ``{"id": 0, ...}`` when ready):
  ``{"op": "exec", "id": n, "key": cell id, "source": code}`` runs an answer cell;
  ``{"op": "call", "id": n, "name": f, "args": [...], "kwargs": [[k, v], ...]}`` calls ``f``.

Responses: ``{"id": n, "ok": true, "value": V}`` or
``{"id": n, "ok": false, "error": {"type", "mro", "message", "traceback"}}``.

A tensor is ``{"t": "tensor", "dtype", "shape", "data"}`` (base64 of its raw bytes), with
``"grad": true`` added when it requires grad (floating-point tensors only; the key is left
out otherwise, so values recorded before it existed read the same). :func:`decode` gives
such a tensor back as a leaf that requires grad: a check's arguments reach the student's
function as they are in the check (an in-place write into one that requires grad raises,
at home and here), and a result still attached to a graph is seen to be attached. The
graph itself never crosses: a tensor computed from one arrives as a leaf.
"""

from __future__ import annotations

import base64
import builtins
import importlib
import importlib.machinery
import json
import os
import sys
from collections.abc import Callable

# --- values on the wire (shared with the checker) ------------------------------------

TENSOR_DTYPES = (
    "float16",
    "bfloat16",
    "float32",
    "float64",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "bool",
)
MAX_DEPTH = 16
MAX_ITEMS = 10_000  # list/tuple/dict entries, in total
MAX_TENSOR_BYTES = 64 * 2**20  # all tensors of one value together
MAX_STR = 100_000


class WireError(ValueError):
    """A value that cannot cross the process boundary."""


def _requires_grad(torch, value) -> bool:
    """``value.requires_grad`` as torch's own getter reads it: a tensor subclass cannot answer
    for itself (a property or ``__torch_function__`` saying False for an attached result)."""
    try:
        base = getattr(torch._C, "TensorBase", None) or torch._C._TensorBase
        with torch._C.DisableTorchFunctionSubclass():
            return bool(base.requires_grad.__get__(value))
    except AttributeError:  # an older torch
        return bool(value.requires_grad)


def encode(value, _state=None, _depth=0):
    """Python value -> JSON-able dict. Tensors are sent as base64 of their raw bytes."""
    import math

    state = _state if _state is not None else {"items": 0, "bytes": 0}
    if _depth > MAX_DEPTH:
        raise WireError(f"nested more than {MAX_DEPTH} levels deep")
    if value is None:
        return {"t": "none"}
    if isinstance(value, bool):
        return {"t": "bool", "v": value}
    torch = sys.modules.get("torch")
    np = sys.modules.get("numpy")
    if np is not None and isinstance(value, np.bool_):
        return {"t": "bool", "v": bool(value)}
    if isinstance(value, int) or (np is not None and isinstance(value, np.integer)):
        v = int(value)
        if not -(2**63) <= v < 2**63:
            raise WireError("an integer outside the 64-bit range")
        return {"t": "int", "v": v}
    if isinstance(value, float) or (np is not None and isinstance(value, np.floating)):
        v = float(value)
        if math.isnan(v):
            return {"t": "float", "v": "nan"}
        if math.isinf(v):
            return {"t": "float", "v": "inf" if v > 0 else "-inf"}
        return {"t": "float", "v": v}
    if isinstance(value, str):
        if len(value) > MAX_STR:
            raise WireError(f"a string longer than {MAX_STR} characters")
        return {"t": "str", "v": value}
    if isinstance(value, (list, tuple)):
        state["items"] += len(value)
        if state["items"] > MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS} list/tuple/dict entries")
        return {
            "t": "tuple" if isinstance(value, tuple) else "list",
            "items": [encode(v, state, _depth + 1) for v in value],
        }
    if isinstance(value, dict):
        state["items"] += len(value)
        if state["items"] > MAX_ITEMS:
            raise WireError(f"more than {MAX_ITEMS} list/tuple/dict entries")
        items = []
        for k, v in value.items():
            if not isinstance(k, str):
                raise WireError(f"a dict with a {type(k).__name__} key (only str keys can be sent)")
            items.append([k, encode(v, state, _depth + 1)])
        return {"t": "dict", "items": items}
    if torch is not None and isinstance(value, torch.dtype):
        name = str(value).replace("torch.", "")
        if name not in TENSOR_DTYPES:
            raise WireError(f"dtype {value}")
        return {"t": "dtype", "v": name}
    if torch is not None and isinstance(value, torch.Tensor):
        t = torch.Tensor.detach(value)
        if t.layout != torch.strided or t.is_quantized or getattr(t, "is_nested", False):
            raise WireError(f"a {t.layout} tensor (only dense tensors can be sent)")
        name = str(t.dtype).replace("torch.", "")
        if name not in TENSOR_DTYPES:
            raise WireError(f"a tensor of dtype {t.dtype}")
        if t.dim() > 8:
            raise WireError(f"a tensor with {t.dim()} dimensions (at most 8)")
        nbytes = t.numel() * t.element_size()
        state["bytes"] += nbytes
        if state["bytes"] > MAX_TENSOR_BYTES:
            raise WireError(f"tensors larger than {MAX_TENSOR_BYTES // 2**20} MB in total")
        grad = (t.dtype.is_floating_point or t.dtype.is_complex) and _requires_grad(torch, value)
        t = t.to("cpu").contiguous().as_subclass(torch.Tensor)
        # reshape(-1): a 1-D view with unit stride, also for 0-d tensors and size-1 dims with odd strides
        raw = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        out = {
            "t": "tensor",
            "dtype": name,
            "shape": list(t.shape),
            "data": base64.b64encode(raw).decode("ascii"),
        }
        if grad:  # only when set: a tensor without it encodes as before
            out["grad"] = True
        return out
    if np is not None and isinstance(value, np.ndarray):
        raise WireError("a numpy array (return a torch.Tensor)")
    raise WireError(f"a value of type {type(value).__module__}.{type(value).__qualname__}")


def decode(obj):
    """Inverse of :func:`encode` (for trusted input; the checker validates untrusted input first)."""
    t = obj["t"]
    if t == "none":
        return None
    if t in ("bool", "int", "str"):
        return obj["v"]
    if t == "float":
        v = obj["v"]
        return float(v) if isinstance(v, str) else float(v)
    if t == "list":
        return [decode(v) for v in obj["items"]]
    if t == "tuple":
        return tuple(decode(v) for v in obj["items"])
    if t == "dict":
        return {k: decode(v) for k, v in obj["items"]}
    import torch

    if t == "dtype":
        return getattr(torch, obj["v"])
    if t == "tensor":
        dtype = getattr(torch, obj["dtype"])
        grad = obj.get("grad", False)
        if not isinstance(grad, bool):
            raise WireError("a tensor's 'grad' must be true or false")
        if grad and not (dtype.is_floating_point or dtype.is_complex):
            raise WireError(
                f"a tensor of dtype {obj['dtype']} cannot require grad (only floating-point tensors can)"
            )
        raw = base64.b64decode(obj["data"], validate=True)
        shape = [int(s) for s in obj["shape"]]
        numel = 1
        for s in shape:
            numel *= s
        itemsize = torch.empty((), dtype=dtype).element_size()
        if len(raw) != numel * itemsize:
            raise WireError(
                f"tensor data has {len(raw)} bytes, shape {shape} of {obj['dtype']} needs {numel * itemsize}"
            )
        if numel == 0:
            out = torch.empty(shape, dtype=dtype)
        else:
            out = torch.frombuffer(bytearray(raw), dtype=dtype).reshape(shape).clone()
        return out.requires_grad_(True) if grad else out
    raise WireError(f"unknown value kind {t!r}")


# --- the worker -------------------------------------------------------------------------

_FRAMES_TO_HIDE = __file__


class ForbiddenCall(RuntimeError):
    """Raised by functions this assignment does not allow answers to call."""


def forbid(dotted: str) -> Callable[[], None]:
    """Replace the function named ``dotted`` (e.g. ``"torch.nn.functional.cross_entropy"``) by
    one that raises :class:`ForbiddenCall`. The grader does it in its sandbox before any answer
    runs; a released exercise notebook does it in the student's kernel (a cell written by
    ``course release``), so that a visible check gives the same verdict at home. Returns a
    function that puts the original back (nothing to undo: a function that does nothing)."""
    parts = dotted.split(".")
    for i in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:-1]:
            owner = getattr(owner, attr, None)
            if owner is None:
                return lambda: None
        if not hasattr(owner, parts[-1]):
            return lambda: None
        original = getattr(owner, parts[-1])

        def stub(*args, __name=dotted, **kwargs):
            raise ForbiddenCall(
                f"{__name} may not be used in this assignment: write the computation yourself"
            )

        stub.__name__ = parts[-1]
        try:
            setattr(owner, parts[-1], stub)
        except (AttributeError, TypeError):
            return lambda: None
        return lambda: setattr(owner, parts[-1], original)
    return lambda: None


class _BlockCourseLib:
    """Import hook: course_lib is not available to graded answers, except the helpers the
    exercise texts recommend for testing (``from course_lib.grading.checks import raises``):
    ``shims`` maps those module names to their source, sent by the grader; their parent
    packages are empty."""

    shims: dict = {}

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname in cls.shims or any(s.startswith(fullname + ".") for s in cls.shims):
            return importlib.machinery.ModuleSpec(fullname, cls, is_package=fullname not in cls.shims)
        if fullname == "course_lib" or fullname.startswith("course_lib."):
            raise ImportError(
                f"cannot import {fullname}: course_lib is not available while answers are graded; "
                "write the answer with torch (and the standard library) only"
            )
        return None

    @classmethod
    def create_module(cls, spec):
        return None

    @classmethod
    def exec_module(cls, module):
        name = module.__name__
        if name in cls.shims:
            exec(compile(cls.shims[name], f"<{name}>", "exec"), module.__dict__)
        else:
            module.__path__ = []

            def __getattr__(attr, _name=name):
                raise AttributeError(
                    f"{_name}.{attr} is not available while answers are graded (of course_lib only "
                    f"{', '.join(sorted(cls.shims))} is); write the answer with torch and the standard library"
                )

            module.__getattr__ = __getattr__


class _IPythonStub:
    """Enough of ``get_ipython()`` for the code IPython generates from magics (``%time``, ``!cmd``)."""

    def __init__(self, namespace):
        self._ns = namespace

    def _run(self, code: str, filename: str):
        """Run ``code`` once in the student's namespace: an expression gives its value, a
        statement (``x = 1``) binds its names, as the magic would in a notebook."""
        try:
            compiled = compile(code, filename, "eval")
        except SyntaxError:
            exec(compile(code, filename, "exec"), self._ns)
            return None
        return eval(compiled, self._ns)

    def run_line_magic(self, name, line, *args, **kwargs):
        if name in ("time", "timeit", "prun") and line.strip():
            import re

            code = line.strip()
            while name != "time":  # options of %timeit / %prun: -n 10 -r 3 -q ...
                m = re.match(r"-[nrpsTDl]\s*\S+\s+|-[oqct]\s+", code)
                if not m:
                    break
                code = code[m.end() :]
            return self._run(code, f"<%{name} magic>")
        return None

    def run_cell_magic(self, name, line, cell, *args, **kwargs):
        if name in ("time", "timeit", "capture", "prun"):
            if name == "timeit" and line.strip():  # %%timeit setup_statement
                self._run(line, "<%%timeit setup>")
            exec(compile(cell, "<cell magic>", "exec"), self._ns)
        return None

    def system(self, *args, **kwargs):
        return None

    getoutput = system

    def magic(self, *args, **kwargs):
        return None

    def __getattr__(self, name):
        return lambda *a, **k: None


def _error_info(exc: BaseException) -> dict:
    import traceback

    cls = type(exc)
    try:
        message = str(exc)
    except BaseException:
        message = "<the exception's message could not be shown>"
    try:
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename != _FRAMES_TO_HIDE]
        tb = "".join(traceback.format_list(frames)) + "".join(traceback.format_exception_only(cls, exc))
    except BaseException:
        tb = ""
    try:
        mro = [c.__name__ for c in cls.__mro__][:64]
    except BaseException:
        mro = [cls.__name__]
    return {
        "type": cls.__name__[:200],
        "mro": [m[:200] for m in mro],
        "message": message[:20000],
        "traceback": tb[-50000:],
    }


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass


def _hardening():
    """``sandbox_hardening.py`` (rlimits, prctl, seccomp), loaded by path from this file's
    folder: the worker runs as a plain script, and ``/grader/`` is no package."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sandbox_hardening.py")
    spec = importlib.util.spec_from_file_location("sandbox_hardening", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _setup(init: dict) -> list[str]:
    """Everything before student code: imports, forbidden functions, limits, the uid."""
    hardening = _hardening()
    sys.path[:] = list(init["sys_path"])
    _BlockCourseLib.shims = {
        k: v for k, v in (init.get("shims") or {}).items() if isinstance(k, str) and isinstance(v, str)
    }
    sys.meta_path.insert(0, _BlockCourseLib)
    warnings = []
    if init.get("prctl"):
        warnings += hardening.prctl_hardening()
    for name in init.get("preload", []):
        try:
            importlib.import_module(name)
        except Exception as exc:
            warnings.append(f"could not preload {name}: {exc}")
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(1)
    for dotted in init.get("forbid", []):
        forbid(dotted)
    try:
        os.nice(int(init.get("nice", 0)))
    except OSError:
        pass
    limits = init.get("limits", {})
    uid = init.get("uid")
    dropped = False
    if uid is not None and os.geteuid() == 0:
        if "nproc" in limits:
            warnings += hardening.set_nproc(int(limits["nproc"]), relative=False)
        try:
            os.setgroups([])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
            dropped = True
        except OSError as exc:
            warnings.append(f"could not switch to an unprivileged user (uid {uid}): {exc}")
    elif "nproc" in limits:
        warnings += hardening.set_nproc(int(limits["nproc"]), relative=os.geteuid() != 0)
    if uid is not None and not dropped and os.geteuid() == 0:
        warnings.append("student code runs as root: the process limit does not apply")
    warnings += hardening.set_limits(limits)
    if init.get("seccomp", True):
        warnings += hardening.install_seccomp()
    if init.get("chdir"):
        os.chdir(init["chdir"])
    init["_dropped"] = dropped
    return warnings


def apply_aliases(args: list, kwargs: dict, aliases) -> None:
    """Make the arguments named in ``aliases`` (``[[first, again], ...]``, indices or keywords)
    one object again: the check passed the same object twice."""
    for first, again in aliases or ():
        try:
            value = args[first] if isinstance(first, int) else kwargs[first]
            if isinstance(again, int):
                args[again] = value
            else:
                kwargs[again] = value
        except (IndexError, KeyError, TypeError):
            pass


def _serve(fd_req: int, fd_resp: int) -> int:
    """The student process: run answer cells and calls until the requests end."""
    rfile = os.fdopen(fd_req, "rb")
    wfile = os.fdopen(fd_resp, "wb")
    dumps, loads = json.dumps, json.loads

    def respond(obj):
        wfile.write(dumps(obj).encode() + b"\n")
        wfile.flush()

    namespace = {"__name__": "__main__", "__builtins__": builtins}
    namespace["get_ipython"] = lambda: _IPythonStub(namespace)

    def display(*objs, **kwargs):
        for obj in objs:
            print(repr(obj))

    namespace["display"] = display
    respond({"id": 0, "ok": True, "value": {"t": "none"}})

    import linecache

    def changed_arguments(req, args, kwargs) -> list:
        """The arguments the call changed in place, encoded as they are now: the check sees
        them changed, exactly as in the student's notebook."""
        out = []
        pairs = list(enumerate(args)) + list(kwargs.items())
        sent = list(req["args"]) + [v for _, v in req["kwargs"]]
        for (key, value), before in zip(pairs, sent):
            if before.get("t") not in ("tensor", "list", "dict", "tuple"):
                continue  # numbers, strings, None: nothing to change in place
            try:
                now = encode(value)
            except WireError:
                continue
            if now != before:
                out.append([key, now])
        return out[:64]

    while True:
        line = rfile.readline()
        if not line:
            return 0
        req = loads(line)
        rid = req.get("id", -1)
        op = req.get("op")
        mutated: list = []
        try:
            if op == "exec":
                filename = f"<answer cell {req['key']}>"
                source = req["source"]
                linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
                code = compile(source, filename, "exec")
                exec(code, namespace)
                value = {"t": "none"}
            elif op == "call":
                name = req["name"]
                if name not in namespace:
                    raise NameError(f"your answer does not define {name!r}")
                fn = namespace[name]
                if not callable(fn):
                    raise TypeError(f"{name!r} is a {type(fn).__name__}, not a function")
                args = [decode(a) for a in req["args"]]
                kwargs = {k: decode(v) for k, v in req["kwargs"]}
                apply_aliases(args, kwargs, req.get("aliases"))
                try:
                    result = fn(*args, **kwargs)
                finally:
                    mutated = changed_arguments(req, args, kwargs)
                try:
                    value = encode(result)
                except WireError as exc:
                    raise WireError(f"{name} returned {exc}, which the grader cannot compare") from None
            else:
                raise ValueError(f"unknown request {op!r}")
        except BaseException as exc:
            _flush()
            respond(
                {
                    "id": rid,
                    "ok": False,
                    "error": _error_info(exc),
                    **({"mutated": mutated} if mutated else {}),
                }
            )
            continue
        _flush()
        respond({"id": rid, "ok": True, "value": value, **({"mutated": mutated} if mutated else {})})


def _zygote(fds: list[int], init: dict, ctl_out) -> int:
    """Fork a fresh student process on request ("spawn"); kill it on request ("kill"); report
    how each one ended. The zygote never runs student code, so a crash or a hang costs a
    fork, not a new sandbox and a new torch import."""
    import select
    import signal

    fd_req, fd_resp, fd_ctl_in, _ = fds
    sweep = bool(init.get("sweep"))  # a uid or PID namespace of our own: kill(-1) hits only this sandbox
    child = pidfd = None
    buf = b""

    def report(obj):
        ctl_out.write(json.dumps(obj).encode() + b"\n")
        ctl_out.flush()

    def reap(pid):
        _, status = os.waitpid(pid, 0)
        for target in (-pid, -1) if sweep else (-pid,):
            for _ in range(3):
                try:
                    os.kill(target, signal.SIGKILL)
                except OSError:
                    break
        while True:  # reap whatever else ended
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        return os.waitstatus_to_exitcode(status)

    while True:
        watch = [fd_ctl_in] + ([pidfd] if pidfd is not None else [])
        timeout = 0.05 if child is not None and pidfd is None else None
        ready, _, _ = select.select(watch, [], [], timeout)
        if child is not None and (
            pidfd in ready if pidfd is not None else os.waitpid(child, os.WNOHANG)[0] != 0
        ):
            code = reap(child)
            if pidfd is not None:
                os.close(pidfd)
            child = pidfd = None
            report({"event": "exit", "code": code})
        if fd_ctl_in not in ready:
            continue
        chunk = os.read(fd_ctl_in, 65536)
        if not chunk:  # the checker is gone
            if child is not None:
                os.kill(-child, signal.SIGKILL)
            return 0
        buf += chunk
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            op = json.loads(line).get("op")
            if op == "spawn" and child is None:
                # what the checker sent to the last student process and it never read: the
                # new process must start with an empty request pipe
                os.set_blocking(fd_req, False)
                try:
                    while os.read(fd_req, 1 << 20):
                        pass
                except OSError:  # BlockingIOError: the pipe is empty
                    pass
                os.set_blocking(fd_req, True)
                pid = os.fork()
                if pid == 0:  # the student process
                    code = 1
                    try:
                        os.setpgid(0, 0)
                        os.close(fds[2])
                        os.close(fds[3])
                        signal.signal(signal.SIGINT, signal.default_int_handler)
                        code = _serve(fd_req, fd_resp)
                    finally:
                        _flush()
                        os._exit(code)
                child = pid
                try:
                    pidfd = os.pidfd_open(pid)
                except (AttributeError, OSError):
                    pidfd = None
            elif (
                op == "interrupt" and child is not None
            ):  # an answer cell ran out of time: stop it as Jupyter does
                try:
                    os.kill(child, signal.SIGINT)
                except OSError:
                    pass
            elif op == "kill" and child is not None:
                try:
                    os.kill(-child, signal.SIGKILL)
                except OSError:
                    pass
                try:
                    os.kill(child, signal.SIGKILL)
                except OSError:
                    pass


def main(argv: list[str]) -> int:
    fds = [int(a) for a in argv[1:5]]  # requests, responses, control in, control out
    ctl_out = os.fdopen(fds[3], "wb")
    line = b""
    while not line.endswith(b"\n"):  # unbuffered: nothing after the init line is consumed
        chunk = os.read(fds[2], 1)
        if not chunk:
            return 1
        line += chunk
    init = json.loads(line)
    warnings = _setup(init)
    init["sweep"] = init.get("sweep") or init.get("_dropped", False)
    ctl_out.write(
        json.dumps({"id": 0, "ok": True, "value": {"t": "none"}, "warnings": warnings[:20]}).encode() + b"\n"
    )
    ctl_out.flush()
    return _zygote(fds, init, ctl_out)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
