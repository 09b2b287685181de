"""Twin of features.py: per-token feature rows, group folds and leave-one-fold-out ridge fits, as loops
over responses, tokens and folds (numpy float64 for the small linear algebra)."""

from __future__ import annotations

import math

import numpy as np
import torch

from backend.core.batch import RolloutBatch
from backend.estimators.features import classify_token


def token_feature_rows(batch: RolloutBatch, i: int, cols: list[int]) -> list[list[float]]:
    """Feature row of each real token of response i, in the column order of `features.token_features`:
    entropy, surprisal, position k/L, one-hot token class (with token text), decision_signal, style_flags."""
    L = len(cols)
    feats = []
    for k, t in enumerate(cols):
        x = []
        if batch.entropies is not None:
            x.append(float(batch.entropies[i, t]))
        if batch.logprobs is not None:
            x.append(-float(batch.logprobs[i, t]))
        x.append((k + 1) / L)
        if batch.tokens is not None:
            cls = classify_token(batch.tokens[i][k])
            x += [1.0 if cls == c else 0.0 for c in range(1, 7)]
        for name in ("decision_signal", "style_flags"):
            e = batch.extras.get(name)
            if e is not None and e.dim() == 2 and tuple(e.shape) == tuple(batch.response_mask.shape):
                v = float(e[i, t])
                x.append(0.0 if math.isnan(v) else v)
        feats.append(x)
    return feats


def hidden_feature_rows(batch: RolloutBatch, i: int, cols: list[int]) -> list[list[float]]:
    """Hidden state of each real token of response i followed by its relative position k/L."""
    hidden = batch.extras["hidden"]
    return [[float(h) for h in hidden[i, t]] + [(k + 1) / len(cols)] for k, t in enumerate(cols)]


def group_folds_loop(batch: RolloutBatch, folds: int) -> tuple[list[int], int]:
    """Fold of each response and the number of folds used: groups in sorted id order, spread over
    min(folds, groups) folds by the same seeded permutation as `features.group_folds`."""
    groups = batch.group_ids.tolist()
    order = sorted(set(groups))
    k = min(int(folds), len(order))
    perm = torch.randperm(max(len(order), 1), generator=torch.Generator().manual_seed(0)).tolist()
    position = {g: n for n, g in enumerate(order)}
    return [perm[position[g]] % max(k, 1) for g in groups], k


def strided(n: int, max_rows: int) -> list[int]:
    """All row numbers when n <= max_rows, else max_rows evenly strided ones (features.subsample_rows)."""
    if n <= max_rows:
        return list(range(n))
    return [int(x) for x in torch.linspace(0, n - 1, max_rows).round().long().tolist()]


def ridge_fold_fits(
    X: list[list[float]], y: list[float], fold: list[int], k: int, alpha: float
) -> list[tuple[np.ndarray, float]]:
    """For each fold j, (w, b) of a ridge fit on the rows outside fold j, in raw feature units.

    Columns are standardized over every row (mean, population std; a constant column keeps scale 1),
    the intercept is not shrunk, and the penalized normal equations are solved by the pseudo-inverse
    (eigenvalues below 1e-10 of the largest dropped), so rank-deficient folds get the minimum-norm fit."""
    Xn = np.array(X, dtype=np.float64).reshape(len(X), -1)
    mu, sd = Xn.mean(0), Xn.std(0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    fits = []
    for j in range(k):
        train = [n for n in range(len(X)) if fold[n] != j]
        A = np.zeros((Xn.shape[1] + 1, Xn.shape[1] + 1))
        rhs = np.zeros(Xn.shape[1] + 1)
        for n in train:
            row = np.append((Xn[n] - mu) / sd, 1.0)
            A += np.outer(row, row)
            rhs += row * y[n]
        A += np.diag([alpha] * Xn.shape[1] + [1e-9])
        coef = np.linalg.pinv(A, rtol=1e-10, hermitian=True) @ rhs
        w = coef[:-1] / sd
        fits.append((w, float(coef[-1] - np.dot(w, mu))))
    return fits
