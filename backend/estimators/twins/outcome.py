"""Twins of outcome.py: the group-relative outcome Z broadcast to every real token."""

from __future__ import annotations

import math

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import outcome_loop, real_columns, scores_list, to_tensor


def _broadcast(batch: RolloutBatch, config, outcome: str) -> torch.Tensor:
    rows = real_columns(batch)
    z = outcome_loop(
        scores_list(batch, config.channel),
        batch.group_ids.tolist(),
        outcome,
        getattr(config, "epsilon", 1e-6),
    )
    return to_tensor(batch, rows, [[z[i]] * len(cols) for i, cols in enumerate(rows)])


@twin("grpo")
def grpo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return _broadcast(batch, config, "grpo" if config.norm_by_std else "dr_grpo")


@twin("dr_grpo")
def dr_grpo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return _broadcast(batch, config, "dr_grpo")


@twin("rloo")
def rloo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return _broadcast(batch, config, "rloo")


@twin("maxrl")
def maxrl_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """Per group: the mean of the scored members, then (R - mean) / (mean + eps) for each of them."""
    scores = scores_list(batch, config.channel)
    groups = batch.group_ids.tolist()
    z = [0.0] * len(scores)
    for g in dict.fromkeys(groups):
        members = [i for i, h in enumerate(groups) if h == g and not math.isnan(float(scores[i]))]
        vals = [float(scores[i]) for i in members]
        if not vals:
            continue
        mean = vals[0] if max(vals) == min(vals) else sum(vals) / len(vals)
        if config.nonpositive_mean == "zero" and mean <= 0:
            continue
        for i in members:
            denominator = mean + config.epsilon
            value = (float(scores[i]) - mean) / denominator if denominator != 0 else math.inf
            z[i] = value if math.isfinite(value) else 0.0
    rows = real_columns(batch)
    return to_tensor(batch, rows, [[z[i]] * len(cols) for i, cols in enumerate(rows)])
