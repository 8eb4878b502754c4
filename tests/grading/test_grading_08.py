"""Chapter 8's graded exercises (the structural probe): the solution notebook's format, its
release, agreement of the reference answers with course_lib.data.corpus and
course_lib.analysis.structural, and `course grade` on full, empty, partial, rewritten, gaming
and mistaken submissions (exact points), with the visible checks giving the same verdict at
home as in the grader."""

from __future__ import annotations

import importlib
import json
import re

import pytest
import torch
from grading_fixtures.chapters import Chapter, answer_sources, cell_source, forbid_rule_tests, tagged_cells

from course_lib.grading.format import load_assignment

CHAPTER = Chapter("08_probing")
SOLUTION, EXERCISE = CHAPTER.solution, CHAPTER.exercise
reference = CHAPTER.reference  # the preamble and the reference answers, executed
DIST, LOSS, UUAS = "tree-distances-answer", "probe-loss-answer", "uuas-answer"
CHECKS = {
    "tree-distances": ["dist-small", "dist-random"],
    "probe-loss": ["probe-small", "probe-habits", "probe-padded", "probe-gradient"],
    "uuas": ["uuas-gold", "uuas-chain", "uuas-random", "uuas-punct", "uuas-orientation"],
}
ALL_CHECKS = [c for cs in CHECKS.values() for c in cs]
VISIBLE = ["dist-small", "probe-small", "probe-habits", "uuas-gold", "uuas-chain"]
STRUCTURAL = (
    "DistanceProbe",
    "distance_loss",
    "pad_sentences",
    "minimum_spanning_tree",
    "tree_edges",
    "uuas",
    # names that also lead to an answer: the corpus's tree functions as imported there, the
    # exact tree embedding (its squared distances are the tree distances), corpus-level scores
    "tree_distances",
    "tree_depths",
    "validate_tree",
    "pythagorean_embedding",
    "distance_scores",
)
CORPUS = ("tree_distances", "tree_depths", "_ancestor_matrix", "validate_tree", "is_valid_tree")
FORBID = (
    # course_lib's own versions (the grader cannot import them; at home they fail too), also
    # under the names the packages re-export
    *(f"course_lib.analysis.structural.{name}" for name in STRUCTURAL),
    "course_lib.analysis.DistanceProbe",
    "course_lib.analysis.minimum_spanning_tree",
    "course_lib.analysis.uuas",
    "course_lib.analysis.distance_scores",
    *(f"course_lib.data.corpus.{name}" for name in CORPUS),
    *(f"course_lib.data.{name}" for name in CORPUS if not name.startswith("_")),
    # scipy's graph algorithms
    *(
        f"scipy.sparse.csgraph.{name}"
        for name in ("minimum_spanning_tree", "shortest_path", "floyd_warshall", "dijkstra")
    ),
)


# --- format and release ----------------------------------------------------------------------


def test_solution_notebook_is_valid_and_released():
    a = load_assignment(SOLUTION)
    assert a.name == "08_probing" and a.title == "Chapter 8: the structural probe" and a.max_points == 12
    assert [e.id for e in a.exercises] == list(CHECKS)
    assert [e.points for e in a.exercises] == [4, 3, 5]
    assert [c.id for c in a.checks] == ALL_CHECKS
    assert [c.id for c in a.checks if not c.hidden] == VISIBLE and sum(c.hidden for c in a.checks) == 6
    # probe-habits is worth 0: it shows at home what probe-gradient grades
    # tree distances (a search and two tree checks, ~30 lines) is worth 4: its hidden check 3
    assert {c.id: c.points for c in a.checks if c.points != 1} == {"probe-habits": 0, "dist-random": 3}
    assert set(FORBID) <= set(a.forbid)
    assert [e.functions for e in a.exercises] == [("tree_distances",), ("distance_probe_loss",), ("uuas",)]
    CHAPTER.assert_released()
    ex = json.loads(EXERCISE.read_text())
    stubs = [cell_source(c) for c in tagged_cells(ex, "answer")]
    assert [s.count("    raise NotImplementedError(") for s in stubs] == [1, 1, 1]
    assert not tagged_cells(ex, "hidden-check") and not tagged_cells(ex, "solution-only")
    assert "Instructor notes" not in EXERCISE.read_text()
    assert ex["metadata"]["course"]["forbid"] == list(a.forbid) and tagged_cells(ex, "course-forbid")


def test_every_forbidden_name_exists():
    """A misspelt name would turn nothing off: each one names a function (or class) of its module."""
    for dotted in FORBID:
        module, name = dotted.rsplit(".", 1)
        assert callable(getattr(importlib.import_module(module), name)), dotted


# --- the reference answers agree with course_lib ---------------------------------------------


def _random_heads(n: int, g: torch.Generator) -> list[int]:
    order = torch.randperm(n, generator=g).tolist()
    heads = [0] * n
    heads[order[0]] = -1
    for k in range(1, n):
        heads[order[k]] = order[int(torch.randint(0, k, (), generator=g))]
    return heads


def test_reference_tree_distances_match_course_lib():
    from course_lib.data.corpus import generate_corpus, is_valid_tree
    from course_lib.data.corpus import tree_distances as library

    ours = reference()["tree_distances"]
    g = torch.Generator().manual_seed(0)
    trees = [_random_heads(int(torch.randint(1, 40, (), generator=g)), g) for _ in range(60)]
    trees += [list(s.heads) for s in generate_corpus(40, seed=3)]
    for heads in trees:
        got = ours(heads)
        assert got.dtype == torch.long and torch.equal(got, torch.from_numpy(library(heads)).long())
    # any list of heads: ours raises ValueError exactly when course_lib says it is no tree
    for _ in range(400):
        n = int(torch.randint(1, 7, (), generator=g))
        heads = torch.randint(-1, n, (n,), generator=g).tolist()
        if is_valid_tree(heads):
            assert torch.equal(ours(heads), torch.from_numpy(library(heads)).long())
        else:
            with pytest.raises(ValueError):
                ours(heads)
    for bad in ([-1, -1, 0], [-1, 2, 1], [1, 0], [-1, 1], [], [2, -1, 0]):
        with pytest.raises(ValueError):
            ours(bad)


def test_reference_loss_matches_course_lib():
    from course_lib.analysis.structural import DistanceProbe, distance_loss

    ours = reference()["distance_probe_loss"]
    g = torch.Generator().manual_seed(1)
    for case in range(20):
        batch, n = int(torch.randint(1, 5, (), generator=g)), int(torch.randint(1, 10, (), generator=g))
        d, k = int(torch.randint(1, 8, (), generator=g)), int(torch.randint(1, 6, (), generator=g))
        dtype = torch.float64 if case % 2 else torch.float32
        lengths = torch.randint(1, n + 1, (batch,), generator=g)
        h = torch.randn(batch, n, d, generator=g, dtype=dtype)
        gold = torch.randint(0, 6, (batch, n, n), generator=g).to(dtype)
        padded = torch.arange(n)[None, :] >= lengths[:, None]
        h = h.masked_fill(padded[:, :, None], 300.0)
        gold = gold.masked_fill(padded[:, :, None] | padded[:, None, :], 1000.0)
        probe = DistanceProbe(d, k).to(dtype)
        with torch.no_grad():
            probe.proj.copy_(torch.randn(k, d, generator=g, dtype=dtype))
        want = distance_loss(probe(h), gold, lengths)
        B = probe.proj.detach().clone().requires_grad_()
        got = ours(B, h, gold, lengths)
        assert got.shape == () and got.dtype == dtype
        rtol = 1e-9 if dtype == torch.float64 else 1e-4
        assert torch.allclose(got, want, rtol=rtol, atol=rtol)
        (g_ours,) = torch.autograd.grad(got, B)
        (g_lib,) = torch.autograd.grad(want, probe.proj)
        assert torch.allclose(g_ours, g_lib, rtol=rtol * 10, atol=rtol * 10)


def test_reference_uuas_matches_course_lib():
    from course_lib.analysis.structural import chain_distances
    from course_lib.analysis.structural import uuas as library
    from course_lib.data.corpus import generate_corpus, tree_distances

    ours = reference()["uuas"]
    g = torch.Generator().manual_seed(2)
    for case in range(200):
        n = int(torch.randint(2, 20, (), generator=g))
        heads = _random_heads(n, g)
        leaves = [i for i in range(n) if i not in heads and heads[i] != -1]
        punct = [i in leaves and bool(torch.rand((), generator=g) < 0.3) for i in range(n)]
        if sum(not p for p in punct) < 2:
            punct = [False] * n
        if case % 3 == 0:  # integer distances: ties, broken the same way (to the lower index)
            d = torch.randint(1, 4, (n, n), generator=g).float()
        else:
            d = torch.rand(n, n, generator=g)
        d = (d + d.T).fill_diagonal_(0.0)
        got = ours(d, heads, punct)
        assert type(got) is float and got == library([d], [heads], [punct])
    for s in generate_corpus(30, seed=4):
        punct = [p == "PUNCT" for p in s.pos]
        for d in (chain_distances(len(s.heads)), torch.from_numpy(tree_distances(s.heads)).float()):
            assert ours(d, list(s.heads), punct) == library([d], [list(s.heads)], [punct])
    assert abs(ours(chain_distances(4), [-1, 0, 0, 0], [False] * 4) - 1 / 3) < 1e-12


# --- grading submissions ------------------------------------------------------------------------

DIST_INT32 = """
from collections import deque


def tree_distances(heads):
    n = len(heads)
    if sum(h == -1 for h in heads) != 1:
        raise ValueError("not one root")
    for start in range(n):
        word, steps = start, 0
        while heads[word] != -1:
            word, steps = heads[word], steps + 1
            if steps > n:
                raise ValueError("a cycle")
    out = torch.zeros(n, n, dtype=torch.int32)  # int32, not torch.long
    for s in range(n):
        seen, queue = {s: 0}, deque([s])
        while queue:
            u = queue.popleft()
            for v in [j for j in range(n) if heads[j] == u] + ([heads[u]] if heads[u] >= 0 else []):
                if v not in seen:
                    seen[v] = seen[u] + 1
                    queue.append(v)
        for v, dist in seen.items():
            out[s, v] = dist
    return out
"""

LOSS_BY_LENGTH = """
def distance_probe_loss(B, h, gold, lengths):
    t = h @ B.T
    predicted = ((t[:, :, None] - t[:, None]) ** 2).sum(-1)
    real = torch.arange(h.shape[1]) < lengths[:, None]
    pairs = real[:, :, None] & real[:, None, :]
    errors = ((gold - predicted).abs() * pairs).sum((1, 2))
    return (errors / lengths).mean()  # divided by |s|, not |s|^2
"""

UUAS_KEEPS_PUNCT = """
def uuas(distances, heads, punct):
    n = len(heads)
    gold = {(min(i, h), max(i, h)) for i, h in enumerate(heads) if h >= 0 and not punct[i] and not punct[h]}
    in_tree, found = {0}, set()
    while len(in_tree) < n:  # Prim over every word, punctuation included
        i, j = min(((i, j) for i in in_tree for j in range(n) if j not in in_tree), key=lambda e: float(distances[e]))
        found.add((min(i, j), max(i, j)))
        in_tree.add(j)
    return len(found & gold) / len(gold)
"""

PARTIAL = {DIST: DIST_INT32, LOSS: LOSS_BY_LENGTH, UUAS: UUAS_KEEPS_PUNCT}
PARTIAL_FAILS = {
    "dist-small",
    "probe-small",
    "probe-habits",
    "probe-padded",
    "probe-gradient",
    "uuas-gold",
    "uuas-punct",
}

REWRITTEN = {
    DIST: '''
import sys


def tree_distances(heads):
    """Depths and lowest common ancestors, from each word's chain of ancestors."""
    n = len(heads)
    if [h for h in heads if h < 0] != [-1]:
        raise ValueError(f"{heads}: one root please")
    chains = []
    for i in range(n):
        chain = [i]
        while heads[chain[-1]] >= 0:
            chain.append(heads[chain[-1]])
            if len(chain) > n:
                raise ValueError(f"word {i} is on a cycle")
        chains.append(chain)
    print("distances for", n, "words", file=sys.stderr)
    depth = torch.tensor([len(c) - 1 for c in chains])
    common = torch.tensor([[len(set(a) & set(b)) - 1 for b in chains] for a in chains])  # depth of the lca
    return depth[:, None] + depth[None, :] - 2 * common
''',
    LOSS: '''
def distance_probe_loss(B, h, gold, lengths):
    """One sentence at a time, with torch.cdist on its real words only."""
    losses = []
    for s in range(h.shape[0]):
        n = int(lengths[s])
        t = h[s, :n] @ B.T
        predicted = torch.cdist(t, t) ** 2
        losses.append((gold[s, :n, :n] - predicted).abs().sum() / n**2)
    return torch.stack(losses).mean()
''',
    UUAS: '''
import numpy as np


def uuas(distances, heads, punct):
    """Kruskal's algorithm with union-find, in numpy, on the kept words."""
    kept = [i for i, p in enumerate(punct) if not p]
    d = np.asarray(distances.tolist())[np.ix_(kept, kept)]
    parent = list(range(len(kept)))

    def root(a):
        while parent[a] != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    found = set()
    for a, b in sorted(((a, b) for a in range(len(kept)) for b in range(a + 1, len(kept))), key=lambda e: d[e]):
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[ra] = rb
            found.add(frozenset((kept[a], kept[b])))
    gold = {frozenset((i, h)) for i, h in enumerate(heads) if h >= 0 and not punct[i] and not punct[h]}
    return np.float64(len(found & gold) / len(gold))
''',
}


def _lookup_uuas() -> str:
    """A student who printed the visible checks' results and returns them from a table keyed by
    the inputs, and 0.5 for every other input."""
    ref = reference()["uuas"]
    seen = {}

    def recording(distances, heads, punct):
        out = ref(distances, heads, punct)
        seen[repr((distances.tolist(), list(heads), list(punct)))] = out
        return out

    sol = json.loads(SOLUTION.read_text())
    for check in tagged_cells(sol, "check"):
        if check["metadata"]["course"]["id"] in ("uuas-gold", "uuas-chain"):
            ns = {**reference(), "uuas": recording}
            exec(compile(cell_source(check), "<uuas check>", "exec"), ns)
    assert len(seen) >= 10
    return f"""
_SEEN = {seen!r}


def uuas(distances, heads, punct):
    return _SEEN.get(repr((distances.tolist(), list(heads), list(punct))), 0.5)
"""


def _copied_expected_loss() -> str:
    """A student who unpacks the expected values shipped in the released visible check and
    answers each recorded call from them (the grader's digest of the arguments, written out
    again without course_lib), and zero for every other input."""
    ex = json.loads(EXERCISE.read_text())
    cell = next(c for c in tagged_cells(ex, "check") if c["metadata"]["course"]["id"] == "probe-small")
    blob = "".join(re.findall(r"    '([A-Za-z0-9+/=]*)'\n", cell_source(cell) + "\n"))
    assert len(blob) > 100
    return f"""
import base64
import hashlib
import json
import zlib

_CALLS = json.loads(zlib.decompress(base64.b64decode({blob!r})))["calls"]


def _encode(t):
    raw = bytes(t.detach().contiguous().reshape(-1).view(torch.uint8).tolist())
    return {{"t": "tensor", "dtype": str(t.dtype).replace("torch.", ""), "shape": list(t.shape),
            "data": base64.b64encode(raw).decode("ascii")}}


def distance_probe_loss(*args):
    text = json.dumps([[_encode(a) for a in args], []], sort_keys=True, separators=(",", ":"))
    entry = _CALLS.get(hashlib.sha256(text.encode()).hexdigest()[:24])
    if entry is None:
        return torch.zeros((), dtype=args[1].dtype)
    value = entry["value"]
    data = bytearray(base64.b64decode(value["data"]))
    return torch.frombuffer(data, dtype=getattr(torch, value["dtype"])).reshape(value["shape"]).clone()
"""


GAMING = {
    # the visible check's answers written out, ValueError where it expects one: nothing (a visible
    # point needs a working function)
    "dist_hard_coded": (
        {
            DIST: """
_ANSWERS = {
    (1, -1, 3, 1, 1): [[0, 1, 3, 2, 2], [1, 0, 2, 1, 1], [3, 2, 0, 1, 3], [2, 1, 1, 0, 2], [2, 1, 3, 2, 0]],
    (-1,): [[0]],
    (1, 2, 3, -1): [[abs(i - j) for j in range(4)] for i in range(4)],
    (1, 2, -1, 5, 5, 2, 2): [[0, 1, 2, 4, 4, 3, 3], [1, 0, 1, 3, 3, 2, 2], [2, 1, 0, 2, 2, 1, 1], [4, 3, 2, 0, 2, 1, 3],
                             [4, 3, 2, 2, 0, 1, 3], [3, 2, 1, 1, 1, 0, 2], [3, 2, 1, 3, 3, 2, 0]],
}


def tree_distances(heads):
    if tuple(heads) in ((-1, -1, 0), (-1, 2, 1)):
        raise ValueError("not a tree")
    n = len(heads)
    return torch.tensor(_ANSWERS.get(tuple(heads), [[1] * n for _ in range(n)]), dtype=torch.long)
"""
        },
        set(),
    ),
    # reads the expected values packed into the released visible check: nothing, likewise
    "loss_copied_expected": ({LOSS: _copied_expected_loss()}, set()),
    # hard-codes the visible checks' results: nothing, likewise
    "uuas_lookup": ({UUAS: _lookup_uuas()}, set()),
    # constants: nothing
    "constants": (
        {
            DIST: """
def tree_distances(heads):
    return torch.ones(len(heads), len(heads), dtype=torch.long)
""",
            LOSS: """
def distance_probe_loss(B, h, gold, lengths):
    return (B * 0).sum()
""",
            UUAS: """
def uuas(distances, heads, punct):
    return 0.5
""",
        },
        set(),
    ),
    # course_lib's own functions, under the names the packages re-export: not importable in the
    # grader, turned off at home: nothing
    "course_lib": (
        {
            DIST: """
from course_lib.data import tree_distances as _library


def tree_distances(heads):
    return torch.from_numpy(_library(heads)).long()
""",
            LOSS: """
import course_lib.analysis as _analysis
from course_lib.analysis.structural import distance_loss as _loss


def distance_probe_loss(B, h, gold, lengths):
    probe = _analysis.DistanceProbe(B.shape[1], B.shape[0])
    probe.proj.data = B
    return _loss(probe(h), gold, lengths)
""",
            UUAS: """
def uuas(distances, heads, punct):
    from course_lib.analysis import uuas as library

    return library([distances], [heads], [punct])
""",
        },
        set(),
    ),
    # scipy's shortest paths and minimum spanning tree: turned off, here and at home: nothing
    "scipy": (
        {
            DIST: """
import numpy as np
from scipy.sparse.csgraph import shortest_path


def tree_distances(heads):
    n = len(heads)
    graph = np.zeros((n, n))
    for i, h in enumerate(heads):
        if h >= 0:
            graph[i, h] = graph[h, i] = 1
    return torch.from_numpy(shortest_path(graph, unweighted=True)).long()
""",
            UUAS: """
import numpy as np
import scipy.sparse.csgraph as csgraph


def uuas(distances, heads, punct):
    kept = [i for i, p in enumerate(punct) if not p]
    d = distances[kept][:, kept].double().numpy() + 1e-9  # (a zero weight is no edge for scipy)
    tree = csgraph.minimum_spanning_tree(d).tocoo()
    found = {frozenset((kept[a], kept[b])) for a, b in zip(tree.row, tree.col)}
    gold = {frozenset((i, h)) for i, h in enumerate(heads) if h >= 0 and not punct[i] and not punct[h]}
    return len(found & gold) / len(gold)
""",
        },
        set(),
    ),
    # objects that claim to equal anything: only plain data crosses, compared by value: nothing
    "fake_equality": (
        {
            DIST: """
class _Equal(torch.Tensor):
    def __eq__(self, other):
        return True

    def tolist(self):
        return _Anything()


class _Anything(list):
    def __eq__(self, other):
        return True


def tree_distances(heads):
    return torch.zeros(len(heads), len(heads), dtype=torch.long).as_subclass(_Equal)
""",
            LOSS: """
class _Close(torch.Tensor):
    def __float__(self):
        return 8 / 3

    def __sub__(self, other):
        return torch.zeros(())


def distance_probe_loss(B, h, gold, lengths):
    return (B.sum() * 0).as_subclass(_Close)
""",
            UUAS: """
class _Score(float):
    def __eq__(self, other):
        return True

    def __sub__(self, other):
        return 0.0

    __rsub__ = __sub__


def uuas(distances, heads, punct):
    return _Score(0.0)
""",
        },
        set(),
    ),
}

DIST_CHECKS, LOSS_CHECKS, UUAS_CHECKS = (
    set(CHECKS["tree-distances"]),
    set(CHECKS["probe-loss"]),
    set(CHECKS["uuas"]),
)
MISTAKES = {
    # the number of words on the path instead of its edges: 0 of 4
    "dist_off_by_one": (
        {
            DIST: """
def tree_distances(heads):
    n = len(heads)
    if sum(h == -1 for h in heads) != 1:
        raise ValueError("not one root")
    up = []
    for i in range(n):
        chain = [i]
        while heads[chain[-1]] != -1:
            chain.append(heads[chain[-1]])
            if len(chain) > n:
                raise ValueError("a cycle")
        up.append(set(chain))
    return torch.tensor([[len(a ^ b) + 1 for b in up] for a in up])  # words, not edges
"""
        },
        set(),
    ),
    # |depth(i) - depth(j)|: right only along one branch: 0 of 4
    "dist_depth_difference": (
        {
            DIST: """
def tree_distances(heads):
    if sum(h == -1 for h in heads) != 1:
        raise ValueError("not one root")
    depth = []
    for i in range(len(heads)):
        k = 0
        while heads[i] != -1:
            i, k = heads[i], k + 1
            if k > len(heads):
                raise ValueError("a cycle")
        depth.append(k)
    d = torch.tensor(depth)
    return (d[:, None] - d[None, :]).abs()
"""
        },
        set(),
    ),
    # right distances, never a ValueError (a forest's unreachable words get -1): 0 of 4
    "dist_never_raises": (
        {
            DIST: """
def tree_distances(heads):
    n = len(heads)
    out = torch.full((n, n), -1, dtype=torch.long)
    for s in range(n):
        out[s, s] = 0
        frontier = [s]
        while frontier:
            nxt = []
            for u in frontier:
                for v in [j for j in range(n) if heads[j] == u] + ([heads[u]] if heads[u] >= 0 else []):
                    if out[s, v] < 0:
                        out[s, v] = out[s, u] + 1
                        nxt.append(v)
            frontier = nxt
    return out
"""
        },
        set(),
    ),
    # only cycles of one or two words detected: longer cycles give -1 distances: 1 of 4
    "dist_misses_long_cycles": (
        {
            DIST: """
def tree_distances(heads):
    n = len(heads)
    if sum(h == -1 for h in heads) != 1:
        raise ValueError("not one root")
    for i, h in enumerate(heads):
        if h == i or (h >= 0 and heads[h] == i):
            raise ValueError("a cycle")
    out = torch.full((n, n), -1, dtype=torch.long)
    for s in range(n):
        out[s, s] = 0
        frontier = [s]
        while frontier:
            nxt = []
            for u in frontier:
                for v in [j for j in range(n) if heads[j] == u] + ([heads[u]] if heads[u] >= 0 else []):
                    if out[s, v] < 0:
                        out[s, v] = out[s, u] + 1
                        nxt.append(v)
            frontier = nxt
    return out
"""
        },
        {"dist-small"},
    ),
    # the right numbers as int32: the visible check wants torch.long: 3 of 4
    "dist_int32": ({DIST: DIST_INT32}, {"dist-random"}),
    # divided by |s| instead of |s|^2: wrong everywhere: 0 of 3
    "loss_by_length": ({LOSS: LOSS_BY_LENGTH}, set()),
    # divided by the padded length n^2: right without padding (the gradient check): 1 of 3
    "loss_by_padded_length": (
        {
            LOSS: """
def distance_probe_loss(B, h, gold, lengths):
    t = h @ B.T
    predicted = ((t[:, :, None] - t[:, None]) ** 2).sum(-1)
    real = torch.arange(h.shape[1]) < lengths[:, None]
    pairs = real[:, :, None] & real[:, None, :]
    return (((gold - predicted).abs() * pairs).sum((1, 2)) / h.shape[1] ** 2).mean()
"""
        },
        {"probe-gradient"},
    ),
    # the padded positions counted: right without padding only: 1 of 3
    "loss_padding_counted": (
        {
            LOSS: """
def distance_probe_loss(B, h, gold, lengths):
    t = h @ B.T
    predicted = ((t[:, :, None] - t[:, None]) ** 2).sum(-1)
    return ((gold - predicted).abs().sum((1, 2)) / lengths.to(h.dtype) ** 2).mean()
"""
        },
        {"probe-gradient"},
    ),
    # one mean over all real pairs of the batch: long sentences weigh more: 1 of 3
    "loss_pairs_of_the_batch": (
        {
            LOSS: """
def distance_probe_loss(B, h, gold, lengths):
    t = h @ B.T
    predicted = ((t[:, :, None] - t[:, None]) ** 2).sum(-1)
    real = torch.arange(h.shape[1]) < lengths[:, None]
    pairs = real[:, :, None] & real[:, None, :]
    return ((gold - predicted).abs() * pairs).sum() / (lengths.to(h.dtype) ** 2).sum()
"""
        },
        {"probe-gradient"},
    ),
    # the padding multiplied by a 0/1 mask: nan when padded values are huge: 2 of 3
    "loss_mask_multiplied": (
        {
            LOSS: """
def distance_probe_loss(B, h, gold, lengths):
    t = h @ B.T
    predicted = ((t[:, :, None] - t[:, None]) ** 2).sum(-1)
    real = (torch.arange(h.shape[1]) < lengths[:, None]).to(h.dtype)
    pairs = real[:, :, None] * real[:, None, :]
    return (((gold - predicted).abs() * pairs).sum((1, 2)) / lengths.to(h.dtype) ** 2).mean()
"""
        },
        {"probe-small", "probe-habits", "probe-gradient"},
    ),
    # right values, but h centred in place (distances do not change; the caller's h does): 2 of 3
    "loss_changes_h_in_place": (
        {
            LOSS: """
def distance_probe_loss(B, h, gold, lengths):
    h -= h[:, :1].clone()  # distances are translation-invariant
    t = h @ B.T
    predicted = ((t[:, :, None] - t[:, None]) ** 2).sum(-1)
    real = torch.arange(h.shape[1]) < lengths[:, None]
    pairs = real[:, :, None] & real[:, None, :]
    errors = torch.where(pairs, (gold - predicted).abs(), torch.zeros((), dtype=h.dtype))
    return (errors.sum((1, 2)) / lengths.to(h.dtype) ** 2).mean()
"""
        },
        {"probe-small", "probe-padded"},
    ),
    # ||B(h_i - h_j)|| without the square: 0 of 3
    "loss_not_squared": (
        {
            LOSS: """
def distance_probe_loss(B, h, gold, lengths):
    t = h @ B.T
    predicted = ((t[:, :, None] - t[:, None]) ** 2).sum(-1).sqrt()
    real = torch.arange(h.shape[1]) < lengths[:, None]
    pairs = real[:, :, None] & real[:, None, :]
    return (((gold - predicted).abs() * pairs).sum((1, 2)) / lengths.to(h.dtype) ** 2).mean()
"""
        },
        set(),
    ),
    # the loss in numpy: right values, no gradient for B: 2 of 3
    "loss_in_numpy": (
        {
            LOSS: """
import numpy as np


def distance_probe_loss(B, h, gold, lengths):
    t = h.detach().numpy() @ B.detach().numpy().T
    total = 0.0
    for s, n in enumerate(lengths.tolist()):
        ts = t[s, :n]
        predicted = ((ts[:, None] - ts[None, :]) ** 2).sum(-1)
        total += np.abs(gold[s, :n, :n].numpy() - predicted).sum() / n**2
    return torch.tensor(total / len(lengths), dtype=h.dtype)
"""
        },
        LOSS_CHECKS - {"probe-habits", "probe-gradient"},
    ),
    # the MST over every word, punctuation included: 3 of 5
    "uuas_keeps_punct": ({UUAS: UUAS_KEEPS_PUNCT}, UUAS_CHECKS - {"uuas-gold", "uuas-punct"}),
    # gold edges as (head, word) pairs against MST edges (i < j): right only where every head
    # comes before its word (uuas-random and uuas-punct grow such trees): 2 of 5
    "uuas_directed_edges": (
        {
            UUAS: """
def uuas(distances, heads, punct):
    kept = [i for i in range(len(heads)) if not punct[i]]
    gold = {(h, i) for i, h in enumerate(heads) if h >= 0 and not punct[i] and not punct[h]}
    in_tree, found = {kept[0]}, set()
    while len(in_tree) < len(kept):
        i, j = min(((i, j) for i in in_tree for j in kept if j not in in_tree), key=lambda e: float(distances[e]))
        found.add((min(i, j), max(i, j)))
        in_tree.add(j)
    return len(found & gold) / len(gold)
"""
        },
        {"uuas-random", "uuas-punct"},
    ),
    # each word linked to its nearest word instead of the MST: the visible examples only: 2 of 5
    "uuas_nearest_neighbour": (
        {
            UUAS: """
def uuas(distances, heads, punct):
    kept = [i for i in range(len(heads)) if not punct[i]]
    found = set()
    for i in kept:
        j = min((j for j in kept if j != i), key=lambda j: float(distances[i, j]))
        found.add(frozenset((i, j)))
    gold = {frozenset((i, h)) for i, h in enumerate(heads) if h >= 0 and not punct[i] and not punct[h]}
    return len(found & gold) / len(gold)
"""
        },
        {"uuas-gold", "uuas-chain"},
    ),
    # the right MST over the kept words, but divided by n - 1 for all n words: 2 of 5
    "uuas_all_words_counted": (
        {
            UUAS: """
def uuas(distances, heads, punct):
    kept = [i for i in range(len(heads)) if not punct[i]]
    gold = {frozenset((i, h)) for i, h in enumerate(heads) if h >= 0 and not punct[i] and not punct[h]}
    in_tree, found = {kept[0]}, set()
    while len(in_tree) < len(kept):
        i, j = min(((i, j) for i in in_tree for j in kept if j not in in_tree), key=lambda e: float(distances[e]))
        found.add(frozenset((i, j)))
        in_tree.add(j)
    return len(found & gold) / (len(heads) - 1)  # punctuation's edges counted in the denominator
"""
        },
        {"uuas-random", "uuas-orientation"},
    ),
    # the score as a 0-d tensor: the checks want a Python float: 0 of 5
    "uuas_tensor": (
        {
            UUAS: """
def uuas(distances, heads, punct):
    kept = [i for i in range(len(heads)) if not punct[i]]
    gold = {frozenset((i, h)) for i, h in enumerate(heads) if h >= 0 and not punct[i] and not punct[h]}
    in_tree, found = {kept[0]}, set()
    while len(in_tree) < len(kept):
        i, j = min(((i, j) for i in in_tree for j in kept if j not in in_tree), key=lambda e: float(distances[e]))
        found.add(frozenset((i, j)))
        in_tree.add(j)
    return torch.tensor(len(found & gold) / len(gold))
"""
        },
        set(),
    ),
}


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    return CHAPTER.grade_cases(
        tmp_path_factory, PARTIAL, REWRITTEN, {UUAS: REWRITTEN[UUAS]}, {**GAMING, **MISTAKES}
    )


EXPECTED = [
    ("solution", 12, set()),
    ("stub", 0, set(ALL_CHECKS)),
    ("partial", 6, PARTIAL_FAILS),
    ("rewritten", 12, set()),
    ("one_exercise", 5, set(ALL_CHECKS) - UUAS_CHECKS),
] + [
    (name, sum({"probe-habits": 0, "dist-random": 3}.get(c, 1) for c in passing), set(ALL_CHECKS) - passing)
    for name, (_, passing) in {**GAMING, **MISTAKES}.items()
]


@pytest.mark.parametrize("name, points, failing", EXPECTED, ids=[e[0] for e in EXPECTED])
def test_exact_points(graded, name, points, failing):
    CHAPTER.assert_points(graded, name, points, failing, ALL_CHECKS, 12)


def test_the_point_table():
    """The points each kind of submission gets, written out (test_exact_points checks them)."""
    table = {name: points for name, points, _ in EXPECTED}
    assert table == {
        "solution": 12,
        "stub": 0,
        "partial": 6,
        "rewritten": 12,
        "one_exercise": 5,
        "dist_hard_coded": 0,
        "loss_copied_expected": 0,
        "uuas_lookup": 0,
        "constants": 0,
        "course_lib": 0,
        "scipy": 0,
        "fake_equality": 0,
        "dist_off_by_one": 0,
        "dist_depth_difference": 0,
        "dist_never_raises": 0,
        "dist_misses_long_cycles": 1,
        "dist_int32": 3,
        "loss_by_length": 0,
        "loss_by_padded_length": 1,
        "loss_padding_counted": 1,
        "loss_pairs_of_the_batch": 1,
        "loss_mask_multiplied": 2,
        "loss_changes_h_in_place": 2,
        "loss_not_squared": 0,
        "loss_in_numpy": 2,
        "uuas_keeps_punct": 3,
        "uuas_directed_edges": 2,
        "uuas_nearest_neighbour": 2,
        "uuas_all_words_counted": 2,
        "uuas_tensor": 0,
    }


def test_gaming_gets_at_most_the_visible_points(graded):
    """A lookup table, the shipped expected values, hard-coded answers, constants, course_lib's or
    scipy's functions and objects that claim equality earn no more than the visible checks of an
    exercise: the hidden checks compare with the reference on inputs the submission has not seen,
    only plain data crosses back, and the forbidden functions are turned off."""
    visible = load_assignment(SOLUTION)
    visible_points = {e.id: sum(c.points for c in e.checks if not c.hidden) for e in visible.exercises}
    for name, (answers, _) in GAMING.items():
        _, rep, _ = graded[name]
        for exercise, checks in CHECKS.items():
            got = sum(c["points"] for c in rep["checks"] if c["id"] in checks)
            assert got <= visible_points[exercise], (name, exercise)
        for c in rep["checks"]:  # hidden checks' messages show no expected values
            if c["hidden"]:
                assert "expected" not in c["message"], c["message"]
    statuses = {a["cell"]: a["status"] for a in graded["course_lib"][1]["answers"]}
    assert "course_lib" in statuses[DIST] and "course_lib" in statuses[LOSS]
    messages = {c["id"]: c["message"] for c in graded["scipy"][1]["checks"]}
    assert "scipy.sparse.csgraph.shortest_path may not be used" in messages["dist-small"]
    assert "scipy.sparse.csgraph.minimum_spanning_tree may not be used" in messages["uuas-gold"]


def test_visible_checks_give_the_grader_verdict_at_home(graded):
    CHAPTER.assert_home_verdicts(graded)
    # course_lib's functions (under their package names too) and scipy's fail at home as in the grader
    for name in ("course_lib", "scipy"):
        home = CHAPTER.home_verdicts(answer_sources(graded[name][2]))
        assert not home["dist-small"] and not home["uuas-gold"] and not home["uuas-chain"], name
    from scipy.sparse.csgraph import minimum_spanning_tree  # and are back afterwards

    from course_lib.analysis import uuas
    from course_lib.data import tree_distances

    assert tree_distances([-1, 0]).tolist() == [[0, 1], [1, 0]] and uuas([torch.eye(2)], [[-1, 0]]) == 1.0
    assert minimum_spanning_tree([[0, 1], [1, 0]]).nnz == 1


def test_failures_are_explained(graded):
    """The feedback says why: the ValueError that never came, the dtype, the missing gradient, the
    tensor instead of a float."""

    def message(name, check):
        return {c["id"]: c["message"] for c in graded[name][1]["checks"]}[check]

    assert "should raise ValueError" in message("dist_never_raises", "dist-small")
    assert "torch.long" in message("dist_int32", "dist-small")
    for check in ("probe-gradient", "probe-habits"):
        assert "carries no gradient to B" in message("loss_in_numpy", check)
    assert "wrong values" in message("loss_by_length", "probe-small")
    assert "should be a number" in message("uuas_tensor", "uuas-gold")
    # the first call that differs decides the message: the padded-length division (wrong values) or, in a
    # draw whose short sentence has one word (its loss is 0 either way), the 1e30 padding (inf * 0 = NaN)
    padded_length = message("loss_by_padded_length", "probe-padded")
    assert "wrong values" in padded_length or "contains NaN" in padded_length, padded_length


# --- the rules: every alias of course_lib's (and other libraries') versions is turned off ----

MUST_FORBID = (
    "scipy.sparse.csgraph.johnson",
    "scipy.sparse.csgraph.bellman_ford",
    "scipy.sparse.csgraph._shortest_path.johnson",
    "networkx.all_pairs_shortest_path_length",
    "networkx.minimum_spanning_tree",
    "course_lib.analysis.structural.tree_distances",
)
COURSE_LIB_ROUTES = {  # name -> (answer cell, an answer that hands the job to a forbidden function, its visible check)
    "scipy_johnson": (
        "tree-distances-answer",
        "import torch\nfrom scipy.sparse import csr_matrix\nfrom scipy.sparse.csgraph import johnson\n\ndef tree_distances(heads):\n    n = len(heads)\n    if sum(h == -1 for h in heads) != 1 or any(h == i for i, h in enumerate(heads)):\n        raise ValueError('not a tree')\n    rows = [i for i, h in enumerate(heads) if h >= 0]\n    graph = csr_matrix(([1.0] * len(rows), (rows, [heads[i] for i in rows])), shape=(n, n))\n    d = johnson(graph, directed=False)\n    if not (d < float('inf')).all():\n        raise ValueError('not a tree')\n    return torch.tensor(d).long()\n",
        "dist-small",
    ),
    "networkx_paths": (
        "tree-distances-answer",
        "import networkx as nx\nimport torch\n\ndef tree_distances(heads):\n    g = nx.Graph()\n    g.add_nodes_from(range(len(heads)))\n    g.add_edges_from((i, h) for i, h in enumerate(heads) if h >= 0)\n    if sum(h == -1 for h in heads) != 1 or not nx.is_connected(g):\n        raise ValueError('not a tree')\n    d = dict(nx.all_pairs_shortest_path_length(g))\n    return torch.tensor([[d[i][j] for j in range(len(heads))] for i in range(len(heads))])\n",
        "dist-small",
    ),
}


(
    test_forbid_list_covers_every_alias_and_the_texts_follow_the_metadata,
    test_a_forbidden_route_fails_at_home_as_in_the_grader,
) = forbid_rule_tests(CHAPTER, MUST_FORBID, COURSE_LIB_ROUTES)
