"""Average ranks and Spearman rank correlation (the credit shares, the oracle and the teacher bench
rank with them)."""

from __future__ import annotations

import math

import numpy as np
import torch


def average_ranks(values: torch.Tensor) -> np.ndarray:
    """Average ranks (1-based, ties share their mean rank) of a 1-D tensor: (N,) float64.

    numpy's sort is several times faster than torch's on CPU for the ~200k pooled tokens of a seed.
    """
    x = values.detach().cpu().numpy()
    order = np.argsort(x)
    ordered = x[order]
    starts = np.empty(x.shape[0], dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    run = np.cumsum(starts) - 1  # (N,) index of each sorted value's run of ties
    counts = np.bincount(run)
    mean_rank = np.cumsum(counts) - (counts - 1) / 2.0  # (U,)
    ranks = np.empty(x.shape[0], dtype=np.float64)
    ranks[order] = mean_rank[run]
    return ranks


def spearman(x: torch.Tensor, y: torch.Tensor, y_ranks: np.ndarray | None = None) -> float:
    """Spearman correlation of two 1-D tensors (Pearson of average ranks); NaN if either is constant.

    y_ranks: `average_ranks(y)` when the caller already has them (the oracle bench reuses the true credit's).
    """
    rx, ry = average_ranks(x), (average_ranks(y) if y_ranks is None else y_ranks)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    # plain sums, not BLAS dot/norm: BLAS threads fight over two shared cores and are 10x slower here
    denominator = math.sqrt(float(np.square(rx).sum()) * float(np.square(ry).sum()))
    return float(np.multiply(rx, ry).sum()) / denominator if denominator > 0 else math.nan
