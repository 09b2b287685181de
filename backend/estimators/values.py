"""Value sources for GAE (docs/estimators.md section 3): zero, stored, fitted, prefix_tree, mc.

Every source returns V(s_t): (B, T) float32 in Z units (the units of the outcome the estimator
uses), 0 on padding, plus diagnostics. V(s_t) is the value of the state before token t.
"""

from __future__ import annotations

from typing import Any

import torch

from backend.core.batch import BatchError, RolloutBatch
from backend.estimators import features, fitting, masked
from backend.estimators import functional as F
from backend.estimators.token_helpers import fallback_message, rollout_list, scores_of
from backend.estimators.tree import build_prefix_tree

MAX_FIT_TOKENS = 65536


def values_from_source(batch: RolloutBatch, config: Any, z: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """Dispatch on `config.value_source`."""
    source = config.value_source
    mask = batch.response_mask
    if source == "zero":
        return torch.zeros(mask.shape, dtype=torch.float32, device=batch.device), {"value_source": "zero"}
    if source == "stored":
        if batch.values is None:
            raise BatchError(
                "value_source 'stored' needs critic values; this run has none "
                "(import `values` per token, or pick fitted, prefix_tree or mc)"
            )
        return torch.where(mask, batch.values.to(torch.float32), 0.0), {"value_source": "stored"}
    if source == "fitted":
        return fitted_values(batch, z, folds=config.folds, ridge=config.ridge)
    if source == "prefix_tree":
        tree = build_prefix_tree(batch.token_ids, mask, batch.group_ids, z)
        return tree.v_before, {"value_source": "prefix_tree"}
    if source == "mc":
        return mc_values(batch, config, z)
    raise ValueError(f"unknown value source {source!r}")


def fitted_values(
    batch: RolloutBatch, z: torch.Tensor, folds: int = 5, ridge: float = 1.0
) -> tuple[torch.Tensor, dict]:
    """A ridge probe from hidden states (extras `hidden` (B, T, H)) or cheap token features to Z.

    Cross-fitted by group: the probe that values a response was fitted on other groups only. With
    fewer than two groups there is nothing to cross-fit on: V = 0 and the diagnostics say so.
    """
    mask = batch.response_mask
    hidden = batch.extras.get("hidden")
    if hidden is not None and hidden.dim() == 3 and hidden.shape[:2] == mask.shape:
        X, names = hidden.to(torch.float32), ["hidden"]
        pos = (masked.positions(mask) + 1).to(torch.float32) / mask.sum(1, keepdim=True).clamp(min=1)
        X = torch.cat([X, pos[..., None]], dim=-1)
    else:
        X, names = features.token_features(batch)
    fold, k = features.group_folds(batch, folds)
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
    if k < 2:
        return zeros, {
            "value_source": "fitted",
            "fallback": "fitted values need at least two groups to cross-fit; used V = 0",
            "value_features": names,
        }
    rows = mask.nonzero(as_tuple=True)
    X_tok = X[rows]  # (N, F)
    y_tok = z.to(torch.float32)[rows[0]]
    f_tok = fold[rows[0]]
    fit = fitting.token_sample(batch, MAX_FIT_TOKENS)
    model = fitting.fitted(
        batch,
        ("fitted_values", k, ridge),
        lambda: features.RidgeStats.of(X_tok[fit], y_tok[fit], f_tok[fit], k, tuple(names)),
        lambda stats: stats.solve(ridge),
    )
    values = zeros.clone()
    if model is not None:  # None: the first pass of a streamed run (statistics only)
        W, b = model
        values[rows] = (X_tok * W[f_tok]).sum(-1) + b[f_tok]
    return values, {
        "value_source": "fitted",
        "value_features": names,
        "value_folds": k,
        "fit_sample": fitting.sample_note(batch, "the fitted value probe", MAX_FIT_TOKENS),
    }


def mc_values(batch: RolloutBatch, config: Any, z: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """V from suffix resampling: extras `mc_values` (reward units) at positions `mc_mask`.

    Converted to Z units with the response's outcome map (Z = scale (R - center)). Between valued
    positions the latest estimate is held; before the first one V is the group mean reward in Z
    units (the value of the empty prefix). Rollouts without any resampled position use V = 0 and are
    listed in the diagnostics.
    """
    mask = batch.response_mask
    mc, mc_mask = batch.extras.get("mc_values"), batch.extras.get("mc_mask")
    zeros = torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
    if mc is None or mc_mask is None or mc.dim() != 2:
        return zeros, {
            "value_source": "mc",
            "fallback": "no resampling results in this run; used V = 0 "
            "everywhere (run `creditlens resample` first)",
            "fallback_rollouts": rollout_list(batch, mask.any(1)),
        }
    valued = (mc_mask > 0.5) & mask
    center, scale = F.outcome_center_scale(
        scores_of(batch, config.channel), batch.group_ids, config.outcome, config.epsilon
    )
    index, n_groups = masked.group_index(batch.group_ids)
    mean_r = masked.group_mean(scores_of(batch, config.channel), index, n_groups)
    root = (mean_r - center) * scale  # (B,)
    v_z = (torch.nan_to_num(mc.to(torch.float32)) - center[:, None]) * scale[:, None]  # (B, T)
    last = masked.forward_fill_index(valued)  # (B, T)
    held = v_z.gather(1, last.clamp(min=0))
    values = torch.where(last >= 0, held, root[:, None].expand_as(held))
    missing = mask.any(1) & ~valued.any(1)
    values = torch.where(missing[:, None] | ~mask, 0.0, values)
    diag = {"value_source": "mc", "mc_positions": int(valued.sum())}
    msg = fallback_message(batch, missing, "no resampled positions: V = 0")
    if msg:
        diag.update(fallback=msg, fallback_rollouts=rollout_list(batch, missing))
    return values, diag
