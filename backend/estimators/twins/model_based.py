"""Twins of model_based.py: OAR's bi-level weights and GCPO's rank weights, one response at a time, as the
official code computes them (numpy / python lists), times Z. Unscored tokens keep weight 1."""

from __future__ import annotations

import math

import numpy as np
import torch

from backend.core.batch import RolloutBatch, model_score_needs
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import outcome_of, real_columns, to_tensor


def _scored(batch: RolloutBatch, name: str) -> tuple[list[list[float]], list[list[float]]]:
    scores_name, mask_name = model_score_needs(name)
    return batch.extras[scores_name].tolist(), batch.extras[mask_name].tolist()


def _oar(name: str, batch: RolloutBatch, config) -> torch.Tensor:
    z = outcome_of(batch, config)
    rows = real_columns(batch)
    scores, scored = _scored(batch, name)
    per_row = []
    for i, cols in enumerate(rows):
        keep = [c for c in cols if scored[i][c] > 0]
        weights = {c: 1.0 for c in cols}
        if keep:
            log_score = np.log1p(np.maximum(np.array([scores[i][c] for c in keep], dtype=np.float64), 0.0))
            lo, hi = log_score.min(), log_score.max()
            norm = (log_score - lo) / (hi - lo if hi > lo else 1.0)
            tau = np.quantile(norm, config.threshold)
            w = np.ones_like(norm)
            low = norm < tau
            w[low] = np.maximum(norm[low] / (tau + 1e-8), config.floor)
            w[~low] = 1.0 + config.beta * (norm[~low] - tau) / (1.0 - tau + 1e-8)
            if config.sum_to_length:
                w = np.ones_like(w) if w.sum() <= 0 else w * (len(w) / (w.sum() + 1e-8))
            weights.update(zip(keep, w.tolist(), strict=True))
        per_row.append([z[i] * weights[c] for c in cols])
    return to_tensor(batch, rows, per_row)


@twin("oar_p")
def oar_p_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return _oar("oar_p", batch, config)


@twin("oar_g")
def oar_g_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return _oar("oar_g", batch, config)


@twin("gcpo")
def gcpo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """The "kl" divergence and "hist" weights per response, as the official loop computes them."""
    z = outcome_of(batch, config)
    rows = real_columns(batch)
    delta, scored = _scored(batch, "gcpo")
    alpha = math.log(1.0 - config.mass) / math.log(1.0 - config.top) - 1.0
    per_row = []
    for i, cols in enumerate(rows):
        keep = [c for c in cols if scored[i][c] > 0]
        weights = {c: 1.0 for c in cols}
        if keep:
            diff = [min(max(delta[i][c], -20.0), 20.0) for c in keep]
            d = [min(max(math.exp(x) - x - 1.0, -10.0), 10.0) for x in diff]
            order = sorted(range(len(d)), key=lambda k: (d[k], k))
            pct = [0.0] * len(d)
            for rank, k in enumerate(order, start=1):
                pct[k] = rank / len(d)
            w = [p**alpha for p in pct]
            total = sum(w)
            weights.update({c: w[k] / total * len(d) for k, c in enumerate(keep)})
        per_row.append([z[i] * weights[c] for c in cols])
    return to_tensor(batch, rows, per_row)
