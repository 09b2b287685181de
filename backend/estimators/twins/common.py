"""Twin of common.py: from token rewards r to advantages, and the redistribution of Z by weights."""

from __future__ import annotations

import math

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.twins.loops import gae_rows, outcome_of, real_columns, to_tensor
from backend.estimators.twins.values import value_rows


def finish_rewards_loop(
    batch: RolloutBatch, config, z: list[float], rows: list[list[int]], r_rows: list[list[float]]
) -> torch.Tensor:
    """A = L r per response, or GAE over r with the config's value source when `then_gae`."""
    if getattr(config, "then_gae", False):
        v_rows = value_rows(batch, config, z, rows)
        return to_tensor(batch, rows, gae_rows(r_rows, v_rows, config.gamma, config.lam))
    return to_tensor(batch, rows, [[x * len(r) for x in r] for r in r_rows])


def redistribute_loop(batch: RolloutBatch, config, weight_rows: list[list[float]]) -> torch.Tensor:
    """r_t = Z w_t / sum_k w_k per response (uniform weights when the sum is not positive and finite),
    then `finish_rewards_loop`."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    r_rows = []
    for i, w in enumerate(weight_rows):
        total = sum(w)
        if not total > 0 or not math.isfinite(total):
            w = [1.0] * len(w)
            total = float(len(w))
        r_rows.append([z[i] * x / total for x in w])
    return finish_rewards_loop(batch, config, z, rows, r_rows)
