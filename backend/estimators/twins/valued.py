"""Twins of valued.py: gae, prefix_tree and suffix_mc, one response and one real token at a time."""

from __future__ import annotations

import math

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import (
    center_scale,
    gae_rows,
    outcome_of,
    real_columns,
    scores_list,
    to_tensor,
)
from backend.estimators.twins.tree import prefix_tree_loop
from backend.estimators.twins.values import value_rows


def actor_lambda_loop(config, length: int) -> float:
    """The advantage's lambda of a response with `length` real tokens: `lam`, or VAPO's length-adaptive
    1 - 1/(alpha length), at least 0."""
    if config.lam_mode == "fixed":
        return config.lam
    return max(0.0, 1.0 - 1.0 / (config.alpha * max(length, 1)))


def gae_loop(batch: RolloutBatch, config) -> tuple[torch.Tensor, torch.Tensor]:
    """gae's advantages and returns (the value targets: with `decoupled`, GAE with critic_lam plus V),
    one response at a time."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    r_rows = [[z[i] if k == len(cols) - 1 else 0.0 for k in range(len(cols))] for i, cols in enumerate(rows)]
    v_rows = value_rows(batch, config, z, rows)
    adv, ret = [], []
    for i, cols in enumerate(rows):
        a = gae_rows([r_rows[i]], [v_rows[i]], config.gamma, actor_lambda_loop(config, len(cols)))[0]
        adv.append(a)
        if config.decoupled:
            a = gae_rows([r_rows[i]], [v_rows[i]], config.gamma, config.critic_lam)[0]
        ret.append([x + v for x, v in zip(a, v_rows[i], strict=True)])
    return to_tensor(batch, rows, adv), to_tensor(batch, rows, ret)


@twin("gae")
def gae_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """GAE with the terminal reward r_L = Z and the config's value source (per-response lambda with VAPO's
    length-adaptive option)."""
    return gae_loop(batch, config)[0]


@twin("prefix_tree")
def prefix_tree_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """A = Z + eta (V(s_{t+1}) - V(s_t)) at branch points of the group's prefix tree, Z elsewhere."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    vb, va, br = prefix_tree_loop(batch, z)
    per_row = [
        [z[i] + config.eta * (va[i][k] - vb[i][k] if br[i][k] else 0.0) for k in range(len(cols))]
        for i, cols in enumerate(rows)
    ]
    return to_tensor(batch, rows, per_row)


@twin("suffix_mc")
def suffix_mc_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """On each token, scale x (value of the next resampled position after it, or R at the end - value of
    the latest one at or before it, or the group mean reward before the first)."""
    rows = real_columns(batch)
    R = scores_list(batch, config.channel)
    groups = batch.group_ids.tolist()
    cs = center_scale(R, groups, config.outcome, config.epsilon)
    mc, mm = batch.extras["mc_values"], batch.extras["mc_mask"]
    out = []
    for i, cols in enumerate(rows):
        grp = [R[j] for j in range(len(R)) if groups[j] == groups[i] and not math.isnan(R[j])]
        root = sum(grp) / len(grp) if grp else 0.0
        valued = [t for t in cols if float(mm[i, t]) > 0.5]
        row = []
        for t in cols:
            before = [s for s in valued if s <= t]
            after = [s for s in valued if s > t]
            v_cur = float(mc[i, before[-1]]) if before else root
            v_next = float(mc[i, after[0]]) if after else R[i]
            row.append(0.0 if cs[i][1] == 0.0 else cs[i][1] * (v_next - v_cur))
        out.append(row)
    return to_tensor(batch, rows, out)
