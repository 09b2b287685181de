"""Plain-loop building blocks of the twins: real token columns, outcome Z, quantiles, GAE over lists.

Everything here works on python lists, one response at a time; the fast path does the same with masked
(B, T) tensors. Formulas: docs/estimators.md.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from backend.core.batch import RolloutBatch


def real_columns(batch: RolloutBatch) -> list[list[int]]:
    """The real token columns of each response (positions where response_mask is true)."""
    return [[t for t, m in enumerate(row) if m] for row in batch.response_mask.cpu().tolist()]


def to_tensor(batch: RolloutBatch, rows: list[list[int]], per_row: list[list[float]]) -> torch.Tensor:
    """(B, T) float32 with per_row[i][k] at column rows[i][k] and exactly 0 elsewhere."""
    out = torch.zeros(batch.response_mask.shape, dtype=torch.float32)
    for i, cols in enumerate(rows):
        for k, t in enumerate(cols):
            out[i, t] = per_row[i][k]
    return out


def center_scale(scores: list[float], groups: list, outcome: str, eps: float) -> list[tuple[float, float]]:
    """(center, scale) per response so that Z = (R - center) * scale, from the group statistics.

    A missing score (NaN) is left out of its group's statistics and gets scale 0; a singleton keeps
    Z = R (scale 1, or 0 when its score is missing); a group of several with fewer than two scores, or
    a grpo group whose scores are all equal, gets scale 0 (Z = 0); under every outcome such a group's
    center is its common value exactly (Z = 0, not a rounding residue)."""
    members: dict = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [(0.0, 1.0)] * len(scores)
    for idx in members.values():
        scored = [i for i in idx if not math.isnan(float(scores[i]))]
        vals = [float(scores[i]) for i in scored]
        n = len(vals)
        flat = n >= 2 and max(vals) == min(vals)
        mean = vals[0] if flat else (sum(vals) / n if n else 0.0)
        for i in idx:
            if len(idx) == 1:
                out[i] = (0.0, 1.0 if n else 0.0)
            elif i not in scored or n < 2:
                out[i] = (mean, 0.0)
            elif outcome == "grpo":
                std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
                out[i] = (mean, 0.0 if flat else 1.0 / (std + eps))
            elif outcome == "dr_grpo":
                out[i] = (mean, 1.0)
            else:  # rloo: the mean of the others
                out[i] = (mean if flat else (sum(vals) - float(scores[i])) / (n - 1), 1.0)
    return out


def outcome_loop(scores: list[float], groups: list, outcome: str = "grpo", eps: float = 1e-6) -> list[float]:
    """Z per response (grpo z-score, dr_grpo minus the mean, rloo minus the others' mean); a missing
    score (NaN) gets Z = 0 and a group of several with fewer than two scores gets Z = 0 (TRL)."""
    cs = center_scale(scores, groups, outcome, eps)
    return [
        0.0 if math.isnan(float(scores[i])) else (float(scores[i]) - c) * k for i, (c, k) in enumerate(cs)
    ]


def scores_list(batch: RolloutBatch, channel: str) -> list[float]:
    """R per response of `channel` (NaN where missing)."""
    return batch.scores[channel].tolist()


def outcome_of(batch: RolloutBatch, config) -> list[float]:
    """Z per response from the config's channel, outcome (grpo when it has none) and epsilon."""
    return outcome_loop(
        scores_list(batch, config.channel),
        batch.group_ids.tolist(),
        getattr(config, "outcome", "grpo"),
        getattr(config, "epsilon", 1e-6),
    )


def quantile(values: list[float], q: float) -> float:
    """The q-quantile of `values` with linear interpolation between order statistics (torch's default)."""
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def entropy_rows(batch: RolloutBatch, rows: list[list[int]]) -> list[list[float]]:
    """H per real token, clamped at 0."""
    return [[max(float(batch.entropies[i, t]), 0.0) for t in cols] for i, cols in enumerate(rows)]


def gae_rows(
    r_rows: list[list[float]], v_rows: list[list[float]], gamma: float, lam: float
) -> list[list[float]]:
    """GAE per response over its real tokens: delta_k = r_k + gamma V_{k+1} - V_k (V after the last real
    token is 0), A_k = delta_k + gamma lam A_{k+1}."""
    out = []
    for r, v in zip(r_rows, v_rows, strict=True):
        adv = [0.0] * len(r)
        running, next_v = 0.0, 0.0
        for k in reversed(range(len(r))):
            delta = r[k] + gamma * next_v - v[k]
            running = delta + gamma * lam * running
            adv[k] = running
            next_v = v[k]
        out.append(adv)
    return out
