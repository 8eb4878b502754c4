r"""Structural probes (Hewitt and Manning, 2019): is a parse tree embedded in a model's vectors?

A **distance probe** is a linear map :math:`B \in \mathbb{R}^{k \times d}` trained so that the
squared distance between two words' projected vectors approximates the number of edges on the
path between them in the parse tree,

.. math:: d_B(h_i, h_j) = \lVert B(h_i - h_j) \rVert_2^2 \approx d_T(i, j),

and a **depth probe** one for which the squared norm approximates the word's depth,
:math:`\lVert B h_i \rVert_2^2 \approx \mathrm{depth}(i)`. Both train on the L1 loss normalised
by sentence length, as the paper trains them (mean over the sentences of a batch):

.. math::

    \mathcal{L}_{\text{dist}} = \frac{1}{|s|^2} \sum_{i, j} \bigl|d_T(i, j) - d_B(h_i, h_j)\bigr|,
    \qquad
    \mathcal{L}_{\text{depth}} = \frac{1}{|s|} \sum_i \bigl|\mathrm{depth}(i) - \lVert B h_i \rVert_2^2\bigr|.

They are scored as in the paper:

* **UUAS** (undirected unlabelled attachment score): the minimum spanning tree of the predicted
  distances (:func:`minimum_spanning_tree`) against the gold tree's edges, punctuation left out
  of both; correct edges over gold edges, over the whole corpus;
* **DSpr.**: for every word, the Spearman correlation between its predicted and gold distances
  to all words of its sentence; averaged over the words of all sentences of one length, then
  over the lengths 5 to 50;
* **root accuracy**: how often the (non-punctuation) word of least predicted depth is the root;
* **NSpr.**: the Spearman correlation of predicted and gold depths per sentence, averaged per
  length, then over the lengths 5 to 50.

Gold depths and distances come from :func:`course_lib.data.corpus.tree_depths` and
:func:`~course_lib.data.corpus.tree_distances`. The vectors come from any layer of any model,
one ``[n_words, dim]`` tensor per sentence (:func:`course_lib.analysis.layers.encoder_word_vectors`
for BERT-family encoders, :func:`~course_lib.analysis.layers.layer_vectors` for ELMo).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from ..data.corpus import tree_depths, tree_distances, validate_tree
from ..device import seed_everything

__all__ = [
    "DistanceProbe",
    "DepthProbe",
    "distance_loss",
    "depth_loss",
    "pad_sentences",
    "fit_structural_probe",
    "predict",
    "probe_loss",
    "minimum_spanning_tree",
    "tree_edges",
    "uuas",
    "spearman",
    "distance_scores",
    "depth_scores",
    "chain_distances",
    "probe_layers",
    "pythagorean_embedding",
]

KINDS = ("distance", "depth")


class DistanceProbe(nn.Module):
    r"""``forward(h)``: :math:`\lVert B(h_i - h_j) \rVert^2` for every pair of words,
    ``[..., n, dim] -> [..., n, n]``."""

    def __init__(self, dim: int, rank: int | None = None):
        super().__init__()
        rank = dim if rank is None else rank
        if dim < 1 or rank < 1:
            raise ValueError(f"a probe needs dim >= 1 and rank >= 1, got dim={dim}, rank={rank}")
        self.proj = nn.Parameter(torch.empty(rank, dim).uniform_(-0.05, 0.05))  # the paper's initialisation

    def forward(self, h: Tensor) -> Tensor:
        t = h @ self.proj.T  # [..., n, k]
        sq = (t * t).sum(-1)
        # ||a - b||^2 = |a|^2 + |b|^2 - 2 a.b: no [n, n, k] difference tensor
        return (sq.unsqueeze(-1) + sq.unsqueeze(-2) - 2 * t @ t.transpose(-1, -2)).clamp(min=0)


class DepthProbe(nn.Module):
    r"""``forward(h)``: :math:`\lVert B h_i \rVert^2` for every word, ``[..., n, dim] -> [..., n]``."""

    def __init__(self, dim: int, rank: int | None = None):
        super().__init__()
        rank = dim if rank is None else rank
        if dim < 1 or rank < 1:
            raise ValueError(f"a probe needs dim >= 1 and rank >= 1, got dim={dim}, rank={rank}")
        self.proj = nn.Parameter(torch.empty(rank, dim).uniform_(-0.05, 0.05))

    def forward(self, h: Tensor) -> Tensor:
        t = h @ self.proj.T
        return (t * t).sum(-1)


def _word_mask(lengths: Tensor, n: int) -> Tensor:
    return torch.arange(n, device=lengths.device) < lengths.unsqueeze(-1)


def distance_loss(predicted: Tensor, gold: Tensor, lengths: Tensor) -> Tensor:
    r"""Mean over sentences of :math:`\frac{1}{|s|^2}\sum_{i,j}|d_T - d_B|` (padded pairs left out).

    ``predicted``, ``gold``: ``[batch, n, n]``; ``lengths``: ``[batch]`` words per sentence.
    """
    if predicted.shape != gold.shape or predicted.dim() != 3:
        raise ValueError(
            f"predicted and gold must both be [batch, n, n], got {tuple(predicted.shape)} and "
            f"{tuple(gold.shape)}"
        )
    words = _word_mask(lengths, predicted.size(-1))
    pairs = words.unsqueeze(-1) & words.unsqueeze(-2)
    per_sentence = ((predicted - gold).abs() * pairs).sum((1, 2)) / lengths.to(predicted.dtype) ** 2
    return per_sentence.mean()


def depth_loss(predicted: Tensor, gold: Tensor, lengths: Tensor) -> Tensor:
    r"""Mean over sentences of :math:`\frac{1}{|s|}\sum_i |\mathrm{depth}(i) - \lVert B h_i \rVert^2|`.

    ``predicted``, ``gold``: ``[batch, n]``; ``lengths``: ``[batch]``.
    """
    if predicted.shape != gold.shape or predicted.dim() != 2:
        raise ValueError(
            f"predicted and gold must both be [batch, n], got {tuple(predicted.shape)} and "
            f"{tuple(gold.shape)}"
        )
    words = _word_mask(lengths, predicted.size(-1))
    return ((predicted - gold).abs() * words).sum(1).div(lengths.to(predicted.dtype)).mean()


def _check_pairs(vectors: Sequence[Tensor], heads: Sequence[Sequence[int]]) -> None:
    if len(vectors) != len(heads):
        raise ValueError(f"{len(vectors)} sentences of vectors but {len(heads)} trees")
    if not len(vectors):
        raise ValueError("no sentences")
    dims = {v.size(-1) for v in vectors}
    if len(dims) != 1:
        raise ValueError(f"every sentence's vectors must have one width, found {sorted(dims)}")
    for k, (v, h) in enumerate(zip(vectors, heads)):
        if v.dim() != 2 or v.size(0) != len(h):
            raise ValueError(
                f"sentence {k}: vectors of shape {tuple(v.shape)} for a tree of {len(h)} words "
                "(expected [n_words, dim])"
            )


def pad_sentences(
    vectors: Sequence[Tensor], heads: Sequence[Sequence[int]], kind: str
) -> tuple[Tensor, Tensor, Tensor]:
    """Vectors ``[N, n_max, dim]``, gold targets (``[N, n_max, n_max]`` distances or ``[N, n_max]``
    depths, zero where padded) and ``lengths`` ``[N]``."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    _check_pairs(vectors, heads)
    n_max = max(len(h) for h in heads)
    N, dim = len(vectors), vectors[0].size(-1)
    x = torch.zeros(N, n_max, dim)
    gold = torch.zeros(N, n_max, n_max) if kind == "distance" else torch.zeros(N, n_max)
    for k, (v, h) in enumerate(zip(vectors, heads)):
        n = len(h)
        x[k, :n] = v.float().cpu()
        if kind == "distance":
            gold[k, :n, :n] = torch.from_numpy(tree_distances(h)).float()
        else:
            gold[k, :n] = torch.from_numpy(tree_depths(h)).float()
    return x, gold, torch.tensor([len(h) for h in heads])


def fit_structural_probe(
    kind: str,
    vectors: Sequence[Tensor],
    heads: Sequence[Sequence[int]],
    *,
    rank: int | None = None,
    steps: int = 300,
    batch_size: int = 20,
    lr: float = 1e-3,
    seed: int = 0,
    history: list[float] | None = None,
) -> DistanceProbe | DepthProbe:
    """Train a ``"distance"`` or ``"depth"`` probe with Adam on random batches of sentences.

    ``vectors``: one ``[n_words, dim]`` tensor per sentence (one layer of a model); ``heads``:
    the gold trees (0-based, -1 = root). ``rank`` is :math:`k`, the rows of :math:`B` (default:
    ``dim``, a full-rank probe). The paper's settings are Adam at ``lr=1e-3`` and batches of 20
    sentences; ``steps`` counts batches. The same inputs and ``seed`` give the same probe. The
    loss of every step is appended to ``history`` when one is given. Returns the probe in eval mode.
    """
    x, gold, lengths = pad_sentences(vectors, heads, kind)
    if steps < 1 or batch_size < 1:
        raise ValueError(f"steps and batch_size must be >= 1, got {steps} and {batch_size}")
    gen = seed_everything(seed)  # initialisation and batch order (COURSE_SEED_OFFSET shifts both)
    probe = (DistanceProbe if kind == "distance" else DepthProbe)(x.size(-1), rank)
    loss_fn = distance_loss if kind == "distance" else depth_loss
    opt = torch.optim.Adam(probe.parameters(), lr=lr)
    for _ in range(steps):
        idx = torch.randint(len(x), (min(batch_size, len(x)),), generator=gen)
        n = int(lengths[idx].max())
        loss = loss_fn(
            probe(x[idx, :n]), gold[idx, :n, :n] if kind == "distance" else gold[idx, :n], lengths[idx]
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
        if history is not None:
            history.append(float(loss.detach()))
    return probe.eval()


@torch.no_grad()
def predict(probe: DistanceProbe | DepthProbe, vectors: Sequence[Tensor]) -> list[Tensor]:
    """The probe's distances ``[n, n]`` (or depths ``[n]``) for every sentence."""
    dev = probe.proj.device
    return [probe(v.float().to(dev)).cpu() for v in vectors]


@torch.no_grad()
def probe_loss(
    probe: DistanceProbe | DepthProbe, vectors: Sequence[Tensor], heads: Sequence[Sequence[int]]
) -> float:
    """The probe's training objective (:func:`distance_loss` or :func:`depth_loss`) over all of
    ``vectors``/``heads`` at once: on the training sentences, how well the probe has fitted them."""
    kind = "distance" if isinstance(probe, DistanceProbe) else "depth"
    x, gold, lengths = pad_sentences(vectors, heads, kind)
    loss_fn = distance_loss if kind == "distance" else depth_loss
    return float(loss_fn(probe(x.to(probe.proj.device)).cpu(), gold, lengths))


# --------------------------------------------------------------------------- trees and scores


def minimum_spanning_tree(distances: Tensor) -> set[tuple[int, int]]:
    """Prim's algorithm on a symmetric ``[n, n]`` distance matrix: the ``n - 1`` edges ``(i, j)``,
    ``i < j``, of a spanning tree of least total distance (ties go to the lower index)."""
    d = torch.as_tensor(distances, dtype=torch.float64)
    if d.dim() != 2 or d.size(0) != d.size(1):
        raise ValueError(f"distances must be a square [n, n] matrix, got shape {tuple(d.shape)}")
    n = d.size(0)
    if n == 0:
        return set()
    if torch.isnan(d).any():
        raise ValueError("distances contain NaN")
    in_tree = torch.zeros(n, dtype=torch.bool)
    in_tree[0] = True
    best, parent = d[0].clone(), torch.zeros(n, dtype=torch.long)
    edges = set()
    for _ in range(n - 1):  # one word joins the tree per step
        j = int(best.masked_fill(in_tree, float("inf")).argmin())
        i = int(parent[j])
        edges.add((min(i, j), max(i, j)))
        in_tree[j] = True
        closer = d[j] < best
        best = torch.where(closer, d[j], best)
        parent = torch.where(closer, torch.full_like(parent, j), parent)
    return edges


def tree_edges(heads: Sequence[int], keep: Sequence[bool] | None = None) -> set[tuple[int, int]]:
    """The undirected edges ``(i, j)``, ``i < j``, of a tree given by its heads, between kept words only."""
    validate_tree(list(heads))
    keep = [True] * len(heads) if keep is None else list(keep)
    return {(min(i, h), max(i, h)) for i, h in enumerate(heads) if h >= 0 and keep[i] and keep[h]}


def _kept(n: int, punct: Sequence[bool] | None) -> list[int]:
    if punct is not None and len(punct) != n:
        raise ValueError(f"a punctuation mask of {len(punct)} for a sentence of {n} words")
    return [i for i in range(n) if punct is None or not punct[i]]


def uuas(
    predicted: Sequence[Tensor], heads: Sequence[Sequence[int]], punct: Sequence[Sequence[bool]] | None = None
) -> float:
    """Undirected unlabelled attachment score over a corpus: the edges of each predicted distance
    matrix's minimum spanning tree that are gold edges, over all gold edges (punctuation left out
    of both trees when ``punct`` masks are given)."""
    correct = total = 0
    for k, (d, h) in enumerate(zip(predicted, heads)):
        keep = _kept(len(h), None if punct is None else punct[k])
        if d.shape != (len(h), len(h)):
            raise ValueError(f"sentence {k}: distances of shape {tuple(d.shape)} for {len(h)} words")
        index = {w: r for r, w in enumerate(keep)}
        gold = {(index[i], index[j]) for i, j in tree_edges(h, [w in index for w in range(len(h))])}
        pred = minimum_spanning_tree(d[keep][:, keep])
        correct += len(pred & gold)
        total += len(gold)
    if total == 0:
        raise ValueError("no gold edges to score (every sentence has fewer than two kept words)")
    return correct / total


def _ranks(x: Tensor) -> Tensor:
    """Ranks along the last dimension, ties given their average rank (1-based)."""
    less = (x.unsqueeze(-1) > x.unsqueeze(-2)).sum(-1)
    equal = (x.unsqueeze(-1) == x.unsqueeze(-2)).sum(-1)
    return less + (equal + 1) / 2


def spearman(a: Tensor, b: Tensor) -> Tensor:
    """Spearman's rank correlation along the last dimension (ties take average ranks, as in
    ``scipy.stats.spearmanr``); a constant row has no ranking and scores 0."""
    a, b = torch.as_tensor(a, dtype=torch.float64), torch.as_tensor(b, dtype=torch.float64)
    if a.shape != b.shape:
        raise ValueError(
            f"spearman needs two tensors of one shape, got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    ra, rb = _ranks(a), _ranks(b)
    ra, rb = ra - ra.mean(-1, keepdim=True), rb - rb.mean(-1, keepdim=True)
    den = ra.norm(dim=-1) * rb.norm(dim=-1)
    return torch.where(den > 0, (ra * rb).sum(-1) / den.clamp(min=1e-300), torch.zeros_like(den))


def _by_length(values: dict[int, list[float]], lengths: tuple[int, int]) -> float:
    lo, hi = lengths
    means = [sum(v) / len(v) for n, v in values.items() if lo <= n <= hi and v]
    if not means:
        raise ValueError(f"no sentence of {lo} to {hi} words to score")
    return sum(means) / len(means)


def distance_scores(
    predicted: Sequence[Tensor],
    heads: Sequence[Sequence[int]],
    punct: Sequence[Sequence[bool]] | None = None,
    *,
    lengths: tuple[int, int] = (5, 50),
) -> dict[str, float]:
    """``{"uuas", "dspr"}`` of predicted distance matrices (see the module docstring)."""
    if len(predicted) != len(heads):
        raise ValueError(f"{len(predicted)} predictions for {len(heads)} trees")
    per_length: dict[int, list[float]] = defaultdict(list)
    for d, h in zip(predicted, heads):
        gold = torch.from_numpy(tree_distances(h))
        per_length[len(h)].extend(spearman(d, gold).tolist())
    return {"uuas": uuas(predicted, heads, punct), "dspr": _by_length(per_length, lengths)}


def depth_scores(
    predicted: Sequence[Tensor],
    heads: Sequence[Sequence[int]],
    punct: Sequence[Sequence[bool]] | None = None,
    *,
    lengths: tuple[int, int] = (5, 50),
) -> dict[str, float]:
    """``{"root_accuracy", "nspr"}`` of predicted depths (see the module docstring)."""
    if len(predicted) != len(heads):
        raise ValueError(f"{len(predicted)} predictions for {len(heads)} trees")
    per_length: dict[int, list[float]] = defaultdict(list)
    hits = 0
    for k, (p, h) in enumerate(zip(predicted, heads)):
        if p.shape != (len(h),):
            raise ValueError(f"sentence {k}: depths of shape {tuple(p.shape)} for {len(h)} words")
        keep = _kept(len(h), None if punct is None else punct[k])
        hits += int(keep[int(p[keep].argmin())] == list(h).index(-1))
        per_length[len(h)].append(float(spearman(p, torch.from_numpy(tree_depths(h)))))
    return {"root_accuracy": hits / len(heads), "nspr": _by_length(per_length, lengths)}


def pythagorean_embedding(heads: Sequence[int]) -> Tensor:
    r"""``[n, n]``: a vector per word whose **squared** distances are exactly the tree distances.

    Word :math:`i` gets the indicator of its ancestors (itself included, the root left out):
    :math:`a_i = \sum_{k \in \mathrm{anc}(i) \setminus \{root\}} e_k`, so
    :math:`\lVert a_i - a_j \rVert^2` counts the words on one side of the path and not the
    other, i.e. the path's edges, and :math:`\lVert a_i \rVert^2 = \mathrm{depth}(i)`. Any tree
    embeds this way (Hewitt and Manning's argument for probing *squared* distances)."""
    validate_tree(list(heads))
    n = len(heads)
    a = torch.zeros(n, n)
    parent = torch.tensor([h if h >= 0 else i for i, h in enumerate(heads)])
    cur = torch.arange(n)
    is_root = torch.tensor([h < 0 for h in heads])
    for _ in range(n):  # walk every word up one level per step (at most n levels)
        a[torch.arange(n), cur] = (~is_root[cur]).float()
        cur = parent[cur]
    return a


def chain_distances(n: int) -> Tensor:
    """``|i - j|``: the distances of the linear-chain baseline (each word linked to the next),
    whose minimum spanning tree is the chain itself."""
    pos = torch.arange(n, dtype=torch.float32)
    return (pos.unsqueeze(0) - pos.unsqueeze(1)).abs()


def probe_layers(
    train_vectors: Sequence[Tensor],
    train_sentences: Sequence,
    test_vectors: Sequence[Tensor],
    test_sentences: Sequence,
    *,
    layers: Sequence[int] | None = None,
    kinds: Sequence[str] = KINDS,
    rank: int | None = None,
    steps: int = 300,
    seed: int = 0,
    lengths: tuple[int, int] = (5, 50),
) -> list[dict[str, float]]:
    """Train a probe of each kind on every layer and score it on the test sentences.

    ``*_vectors``: one ``[n_layers, n_words, dim]`` tensor per sentence (from
    :func:`~course_lib.analysis.layers.encoder_word_vectors` or, for ELMo,
    :func:`~course_lib.analysis.layers.layer_vectors`); ``*_sentences``: sentences with gold
    trees (``heads``; ``punct_mask`` leaves punctuation out of UUAS and root accuracy). Returns
    one dict per layer (``layer`` and the scores of :func:`distance_scores` and
    :func:`depth_scores`).
    """
    for name, vecs, sents in (
        ("train", train_vectors, train_sentences),
        ("test", test_vectors, test_sentences),
    ):
        if len(vecs) != len(sents):
            raise ValueError(f"{len(vecs)} {name} sentences of vectors but {len(sents)} {name} sentences")
        if any(getattr(x, "heads", None) is None for x in sents):
            raise ValueError(f"every {name} sentence needs a gold tree (heads)")
    n_layers = train_vectors[0].size(0)
    heads_tr = [x.heads for x in train_sentences]
    heads_te = [x.heads for x in test_sentences]
    punct = [x.punct_mask for x in test_sentences]
    out = []
    for layer in range(n_layers) if layers is None else layers:
        row: dict[str, float] = {"layer": layer}
        tr = [v[layer] for v in train_vectors]
        te = [v[layer] for v in test_vectors]
        for kind in kinds:
            probe = fit_structural_probe(kind, tr, heads_tr, rank=rank, steps=steps, seed=seed)
            score = distance_scores if kind == "distance" else depth_scores
            row.update(score(predict(probe, te), heads_te, punct, lengths=lengths))
        out.append(row)
    return out
