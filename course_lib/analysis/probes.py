r"""Probes: how much of a property a frozen representation makes linearly readable.

* :func:`train_probe`: multinomial logistic regression on standardised features (full batch,
  Adam), the classic probing classifier (chapter 1: part of speech from ELMo's layers);
* :func:`linear_probe`: ridge regression onto one-hot targets, solved in closed form,

  .. math:: W = (X^\top X + \lambda I)^{-1} X^\top Y,

  fitted on one half of the rows and scored on the other (chapter 3: position and segment
  read back from BERT's input embeddings);
* :func:`normalise_layers`: each layer of a ``[layers, n, dim]`` stack scaled to mean 0 and
  variance 1 over all its elements, the normalisation of ELMo's ``ScalarMix(do_layer_norm=True)``
  (defined with it, in :mod:`course_lib.models.elmo`; re-exported here for the probes).

The structural probes of parse trees (distances and depths) are in
:mod:`course_lib.analysis.structural`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..device import seed_everything
from ..models.elmo import normalise_layers

__all__ = ["train_probe", "linear_probe", "normalise_layers"]


def train_probe(
    X_train: Tensor, y_train: Tensor, n_classes: int, *, steps: int = 200, lr: float = 0.05
) -> Callable[[Tensor], Tensor]:
    """Logistic regression on standardised features (full batch, Adam); returns a predict function.

    ``X_train``: ``[n, dim]`` features, ``y_train``: ``[n]`` class ids. The probe starts from
    seed 0, so the same data gives the same probe. ``predict(X)`` returns class ids ``[m]``.
    """
    seed_everything(0)
    mean, std = X_train.mean(0), X_train.std(0) + 1e-6
    probe = nn.Linear(X_train.shape[1], n_classes)
    optimiser = torch.optim.Adam(probe.parameters(), lr=lr)
    for _ in range(steps):
        optimiser.zero_grad()
        F.cross_entropy(probe((X_train - mean) / std), y_train).backward()
        optimiser.step()
    return lambda X: probe((X - mean) / std).argmax(-1).detach()


def linear_probe(X: Tensor, y: Tensor, n_classes: int, lam: float = 1e-2) -> float:
    """Ridge regression onto one-hot targets, fitted on one half, accuracy on the other.

    The halves come from a fixed permutation (seed 0); features get a bias column; the
    solve runs in float64.
    """
    perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
    fit_idx, test_idx = perm[: len(y) // 2], perm[len(y) // 2 :]
    Xb = torch.cat([X, torch.ones(len(X), 1)], 1).double()
    Y = F.one_hot(y, n_classes).double()
    A = Xb[fit_idx].T @ Xb[fit_idx] + lam * torch.eye(Xb.size(1), dtype=torch.double)
    W = torch.linalg.solve(A, Xb[fit_idx].T @ Y[fit_idx])
    return ((Xb[test_idx] @ W).argmax(1) == y[test_idx]).float().mean().item()
