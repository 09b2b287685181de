"""Cheap per-token features and a cross-fitted ridge regression (fitted values, token RM, RUDDER).

Features never look at the outcome. Cross-fitting assigns whole groups to folds, so a response (and
its siblings, which share the prompt) never predicts itself.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import torch

from backend.core.batch import RolloutBatch
from backend.estimators import fitting, masked

TOKEN_CLASSES = ("pad", "newline", "space", "punct", "digit", "word", "other")
_CLASS_ID = {name: i for i, name in enumerate(TOKEN_CLASSES)}
_PUNCT = re.compile(r"^\W+$")


def classify_token(text: str) -> int:
    """Class id of one token string (see TOKEN_CLASSES)."""
    if "\n" in text:
        return _CLASS_ID["newline"]
    stripped = text.strip()
    if not stripped:
        return _CLASS_ID["space"]
    if stripped.isdigit():
        return _CLASS_ID["digit"]
    if stripped.replace("_", "").isalpha() or stripped.isalnum():
        return _CLASS_ID["word"]
    if _PUNCT.match(stripped):
        return _CLASS_ID["punct"]
    return _CLASS_ID["other"]


def token_classes(batch: RolloutBatch) -> torch.Tensor | None:
    """(B, T) int64 class ids from the token text (0 on padding), or None when the run has no text.

    Classification runs once per distinct token id (the first text seen for it), not per token.
    """
    if batch.tokens is None:
        return None
    mask = batch.response_mask.cpu()
    ids = batch.token_ids.cpu()[mask].numpy()  # (N,) real tokens in row-major order
    flat = [tok for row in batch.tokens for tok in row]
    if len(flat) != ids.shape[0]:
        return None  # token text does not line up with the mask; classes unknown
    uniq, first = np.unique(ids, return_index=True)
    classes_of = np.array([classify_token(flat[i]) for i in first], dtype=np.int64)
    per_token = classes_of[np.searchsorted(uniq, ids)]
    out = torch.zeros(mask.shape, dtype=torch.long)
    out[mask] = torch.from_numpy(per_token)
    return out.to(batch.device)


def token_features(batch: RolloutBatch, flags: bool = True) -> tuple[torch.Tensor, list[str]]:
    """X: (B, T, F) float32 per-token features, 0 on padding, and their names.

    entropy, surprisal (-logprob), relative position t/L, one-hot token class (when the run has
    token text), and, when present, extras `decision_signal` and `style_flags` (synthetic runs).
    """
    mask = batch.response_mask
    cols: list[torch.Tensor] = []
    names: list[str] = []
    if batch.entropies is not None:
        cols.append(batch.entropies.to(torch.float32))
        names.append("entropy")
    if batch.logprobs is not None:
        cols.append(-batch.logprobs.to(torch.float32))
        names.append("surprisal")
    k = (masked.positions(mask) + 1).to(torch.float32)
    L = mask.sum(dim=1, keepdim=True).clamp(min=1).to(torch.float32)
    cols.append(k / L)
    names.append("position")
    classes = token_classes(batch)
    if classes is not None:
        for c in range(1, len(TOKEN_CLASSES)):
            cols.append((classes == c).to(torch.float32))
            names.append(f"class_{TOKEN_CLASSES[c]}")
    if flags:
        for name in ("decision_signal", "style_flags"):
            x = batch.extras.get(name)
            if x is not None and x.dim() == 2 and x.shape == mask.shape:
                cols.append(torch.nan_to_num(x.to(torch.float32)))
                names.append(name)
    X = torch.stack(cols, dim=-1)  # (B, T, F)
    return torch.where(mask[..., None], X, 0.0), names


def group_folds(batch: RolloutBatch, folds: int) -> tuple[torch.Tensor, int]:
    """Fold of each response (B,) int64 by group, and the number of folds actually used (<= groups).
    Groups are numbered within the run when the batch is a chunk of a streamed run (`batch.run_fit`)."""
    run_fit = batch.run_fit
    index, n_groups = masked.group_index(batch.group_ids) if run_fit is None else run_fit.group_index(batch)
    k = min(int(folds), n_groups)
    # A fixed permutation of groups spreads neighbouring prompts over folds deterministically.
    gen = torch.Generator().manual_seed(0)
    perm = torch.randperm(max(n_groups, 1), generator=gen).to(index.device)
    return (perm[index] % max(k, 1)), k


def ridge_folds(
    X: torch.Tensor, y: torch.Tensor, fold: torch.Tensor, k: int, alpha: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Leave-one-fold-out ridge fits on rows X (N, F), y (N,), fold (N,) in [0, k): `RidgeStats.solve`."""
    return RidgeStats.of(X, y, fold, k).solve(alpha)


@dataclass(frozen=True)
class RidgeStats:
    """Per-fold sufficient statistics of a ridge fit, taken about a shift K (the first rows' mean, which
    keeps the sums of squares free of cancellation): rows n (k,), s = sum (x - K) (k, F),
    G = sum (x - K)(x - K)^T (k, F, F), t = sum (x - K) y (k, F), sy = sum y (k,), all float64.
    They add up over disjoint sets of rows (`merge`): a fit over a run's chunks equals one over all rows."""

    names: tuple[str, ...]
    shift: torch.Tensor
    n: torch.Tensor
    s: torch.Tensor
    G: torch.Tensor
    t: torch.Tensor
    sy: torch.Tensor

    @classmethod
    def of(
        cls, X: torch.Tensor, y: torch.Tensor, fold: torch.Tensor, k: int, names: tuple[str, ...] = ()
    ) -> RidgeStats:
        X64, y64 = X.to(torch.float64), y.to(torch.float64)
        shift = (
            X64.mean(dim=0) if X.shape[0] else torch.zeros(X.shape[1], dtype=torch.float64, device=X.device)
        )
        d = X64 - shift  # (N, F)
        onehot = torch.nn.functional.one_hot(fold, k).to(torch.float64)  # (N, k)
        gram = torch.einsum("nk,nf,ng->kfg", onehot, d, d)  # (k, F, F)
        return cls(
            tuple(names),
            shift,
            onehot.sum(0),
            onehot.T @ d,
            gram,
            torch.einsum("nk,nf,n->kf", onehot, d, y64),
            onehot.T @ y64,
        )

    def merge(self, other: RidgeStats) -> RidgeStats:
        """The statistics of both sets of rows, about this one's shift."""
        fitting.same_columns(self.names, other.names)
        if float(self.n.sum()) == 0:
            return other
        delta = other.shift - self.shift  # (F,) other's rows about this shift: d + delta
        s = other.s + other.n[:, None] * delta
        G = (
            other.G
            + other.s[:, :, None] * delta[None, None, :]
            + delta[None, :, None] * other.s[:, None, :]
            + other.n[:, None, None] * torch.outer(delta, delta)
        )
        t = other.t + delta[None, :] * other.sy[:, None]
        return RidgeStats(
            self.names, self.shift, self.n + other.n, self.s + s, self.G + G, self.t + t, self.sy + other.sy
        )

    def solve(self, alpha: float) -> tuple[torch.Tensor, torch.Tensor]:
        """Leave-one-fold-out ridge fits: weights W (k, F) and intercepts b (k,) in the raw feature units.

        Fit j uses every row not in fold j, so rows of fold j are predicted by `X @ W[j] + b[j]` without
        having seen themselves. Columns are standardized on all rows (no labels involved) before the
        penalty; the intercept is not shrunk. Solved in float64 by the pseudo-inverse of the penalized Gram
        matrix rather than `solve`: with `alpha = 0` (or a tiny one) a fold can train on fewer rows than
        features, or on constant or collinear columns, and the matrix is singular. The pseudo-inverse gives
        the minimum-norm least-squares fit there (directions the training rows do not identify get weight 0)
        and the ordinary ridge solution wherever the matrix is well conditioned.
        """
        n, s, G, t, sy = self.n, self.s, self.G, self.t, self.sy
        k, F = s.shape
        c = s.sum(0) / n.sum().clamp(min=1)  # (F,) mean - shift
        mu = self.shift + c
        var = (G.sum(0).diagonal() / n.sum().clamp(min=1) - c * c).clamp(min=0.0)
        sd = var.sqrt()
        sd = torch.where(sd > 1e-12, sd, torch.ones_like(sd))
        # sums about the mean: x - mu = d - c
        s_mu = s - n[:, None] * c  # (k, F)
        G_mu = (
            G
            - s[:, :, None] * c[None, None, :]
            - c[None, :, None] * s[:, None, :]
            + n[:, None, None] * torch.outer(c, c)
        )
        t_mu = t - c[None, :] * sy[:, None]
        gram = torch.zeros((k, F + 1, F + 1), dtype=torch.float64, device=s.device)  # rows [(x - mu) / sd, 1]
        gram[:, :F, :F] = G_mu / (sd[:, None] * sd[None, :])
        gram[:, :F, F] = gram[:, F, :F] = s_mu / sd
        gram[:, F, F] = n
        xty = torch.cat([t_mu / sd, sy[:, None]], dim=1)  # (k, F+1)
        gram_out = gram.sum(0, keepdim=True) - gram
        xty_out = xty.sum(0, keepdim=True) - xty
        penalty = torch.eye(F + 1, dtype=torch.float64, device=s.device) * alpha
        penalty[F, F] = 1e-9
        coef = (_pinv_psd(gram_out + penalty) @ xty_out[..., None])[..., 0]  # (k, F+1)
        W = coef[:, :F] / sd  # (k, F)
        b = coef[:, F] - (W * mu).sum(dim=1)  # (k,)
        return W.to(torch.float32), b.to(torch.float32)


def _pinv_psd(A: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """Pseudo-inverse of a batch of symmetric PSD matrices (k, n, n) from one `eigh` (CPU and CUDA).

    Eigenvalues below `rtol` x the largest of their matrix are treated as 0: in float64 the round-off
    of a Gram matrix is ~1e-16 x its scale, so 1e-10 drops only directions the data do not determine,
    which would otherwise get weights of the size of 1 / round-off.
    """
    evals, evecs = torch.linalg.eigh(A)  # (k, n), (k, n, n)
    cutoff = rtol * evals.abs().amax(dim=-1, keepdim=True)
    inv = torch.where(evals > cutoff, 1.0 / evals.clamp(min=torch.finfo(A.dtype).tiny), 0.0)
    return (evecs * inv[..., None, :]) @ evecs.mT


def subsample_rows(n: int, max_rows: int, device: torch.device) -> torch.Tensor:
    """Deterministic evenly strided row indices (all rows when n <= max_rows)."""
    return fitting.strided(n, max_rows, device)
