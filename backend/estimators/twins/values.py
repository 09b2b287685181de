"""Twin of values.py: the value sources of GAE (zero, stored, fitted, prefix_tree, mc) per real token.

V(s_t) is the value of the state before token t, in Z units. The fitted and MC sources are written here
from their definitions (docs/estimators.md section 3); nothing calls the fast path.
"""

from __future__ import annotations

import math

import numpy as np

from backend.core.batch import RolloutBatch
from backend.estimators.twins.features import (
    group_folds_loop,
    hidden_feature_rows,
    ridge_fold_fits,
    strided,
    token_feature_rows,
)
from backend.estimators.twins.loops import center_scale, scores_list
from backend.estimators.twins.tree import prefix_tree_loop

MAX_FIT_TOKENS = 65536  # the fast path's cap on the tokens the probe is fitted on (values.MAX_FIT_TOKENS)


def value_rows(batch: RolloutBatch, config, z: list[float], rows: list[list[int]]) -> list[list[float]]:
    """V(s_t) per real token from `config.value_source`."""
    source = config.value_source
    if source == "zero":
        return [[0.0] * len(cols) for cols in rows]
    if source == "stored":
        return [[float(batch.values[i, t]) for t in cols] for i, cols in enumerate(rows)]
    if source == "prefix_tree":
        v_before, _, _ = prefix_tree_loop(batch, z)
        return v_before
    if source == "fitted":
        return fitted_value_rows(batch, z, rows, config.folds, config.ridge)
    if source == "mc":
        return mc_value_rows(batch, config, rows)
    raise ValueError(f"unknown value source {source!r}")


def fitted_value_rows(
    batch: RolloutBatch, z: list[float], rows: list[list[int]], folds: int, ridge: float
) -> list[list[float]]:
    """A ridge probe from each token's features (hidden states + position when the batch has them) to its
    response's Z, cross-fitted by group: a token is valued by the fit that left its fold out. With fewer
    than two groups there is nothing to cross-fit on: V = 0."""
    fold, k = group_folds_loop(batch, folds)
    if k < 2:
        return [[0.0] * len(cols) for cols in rows]
    hidden = batch.extras.get("hidden")
    use_hidden = (
        hidden is not None
        and hidden.dim() == 3
        and tuple(hidden.shape[:2]) == tuple(batch.response_mask.shape)
    )
    X, y, owner = [], [], []
    for i, cols in enumerate(rows):
        feats = hidden_feature_rows(batch, i, cols) if use_hidden else token_feature_rows(batch, i, cols)
        X += feats
        y += [z[i]] * len(feats)
        owner += [i] * len(feats)
    if not X:  # no real token to fit (every response empty)
        return [[] for _ in rows]
    fit = strided(len(X), MAX_FIT_TOKENS)
    fits = ridge_fold_fits([X[n] for n in fit], [y[n] for n in fit], [fold[owner[n]] for n in fit], k, ridge)
    out: list[list[float]] = [[] for _ in rows]
    for x, i in zip(X, owner, strict=True):
        w, b = fits[fold[i]]
        out[i].append(float(np.dot(w, x) + b))
    return out


def mc_value_rows(batch: RolloutBatch, config, rows: list[list[int]]) -> list[list[float]]:
    """V from suffix resampling (extras mc_values at positions mc_mask > 0.5), mapped to Z units by the
    response's outcome map Z = (R - center) scale: at a token, the latest resampled estimate at or before
    it; before the first one, the group mean reward (the empty prefix). A response without any resampled
    position, or a run without resampling results, gets V = 0."""
    mc, mc_mask = batch.extras.get("mc_values"), batch.extras.get("mc_mask")
    if mc is None or mc_mask is None or mc.dim() != 2:
        return [[0.0] * len(cols) for cols in rows]
    R = scores_list(batch, config.channel)
    groups = batch.group_ids.tolist()
    cs = center_scale(R, groups, config.outcome, config.epsilon)
    out = []
    for i, cols in enumerate(rows):
        center, scale = cs[i]
        mates = [R[j] for j in range(len(R)) if groups[j] == groups[i] and not math.isnan(R[j])]
        held = ((sum(mates) / len(mates) if mates else 0.0) - center) * scale
        valued = [t for t in cols if float(mc_mask[i, t]) > 0.5]
        row = []
        for t in cols:
            if t in valued:
                v = float(mc[i, t])
                held = ((0.0 if math.isnan(v) else v) - center) * scale
            row.append(held if valued else 0.0)
        out.append(row)
    return out
