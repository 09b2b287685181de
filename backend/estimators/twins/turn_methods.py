"""Twins of turn_methods.py: Progress Advantage and prime-rl's turn credit, one response and one turn at a
time over python lists (prime-rl's `deltas` and `smear` written out again here, never imported)."""

from __future__ import annotations

import math

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import real_columns, to_tensor


def _turn_columns(batch: RolloutBatch, row: int, cols: list[int]) -> list[list[int]]:
    """The trained columns of each assistant turn of `row` (the whole response when it has no turns)."""
    turns = batch.turns[row] if batch.turns is not None else []
    if not turns:
        return [list(cols)]
    return [[t for t in cols if start <= t < end] for role, start, end in turns if role == "assistant"]


def _agg(values: list[float], how: str) -> float:
    if not values:
        return 0.0
    if how == "mean":
        return sum(values) / len(values)
    if how == "sum":
        return sum(values)
    if how == "last":
        return values[-1]
    return min(values) if how == "min" else max(values)


@twin("progress_advantage")
def progress_advantage_twin(batch: RolloutBatch, config) -> torch.Tensor:
    rows = real_columns(batch)
    logp, ref = batch.logprobs.tolist(), batch.ref_logprobs.tolist()
    out = []
    for i, cols in enumerate(rows):
        value = dict.fromkeys(cols, 0.0)
        for turn in _turn_columns(batch, i, cols):
            p = _agg([logp[i][t] for t in turn], config.token_agg)
            r = _agg([ref[i][t] for t in turn], config.token_agg)
            for t in turn:
                value[t] = config.beta * (p - r)
        out.append([value[t] for t in cols])
    return to_tensor(batch, rows, out)


def _progress(phis: list) -> list[float]:
    out, last = [], None
    for phi in phis:
        out.append(0.0 if phi is None or last is None else phi - last)
        last = phi if phi is not None else last
    return out


def _smeared(progress: list[float], gamma: float) -> list[float]:
    """c_k = Σ_{j ≥ k} γ^{j−k} r_j / Σ_{d < j} γ^d, summed directly (not by the backward recursion)."""
    n = len(progress)
    return [
        sum(gamma ** (j - k) * progress[j] / sum(gamma**d for d in range(j + 1)) for j in range(k, n))
        for k in range(n)
    ]


@twin("turn_credit")
def turn_credit_twin(batch: RolloutBatch, config) -> torch.Tensor:
    rows = real_columns(batch)
    R = batch.scores[config.channel].tolist()
    groups = batch.group_ids.tolist()
    scores = [list(r) if r else None for r in (batch.turn_rewards or [None] * batch.B)]
    returns = [R[i] + (sum(_progress(s)) if s is not None else 0.0) for i, s in enumerate(scores)]
    out = []
    for i, cols in enumerate(rows):
        mates = [returns[j] for j in range(batch.B) if groups[j] == groups[i] and not math.isnan(returns[j])]
        level = 0.0 if math.isnan(returns[i]) else returns[i] - sum(mates) / len(mates)
        turns = _turn_columns(batch, i, cols)
        s = scores[i]
        if s is None or config.beta == 0.0 or len(s) != len(turns) or not cols:
            out.append([level] * len(cols))
            continue
        credit = _smeared(_progress(s), config.gamma)
        weight = sum(len(turn) for turn in turns)
        center = sum(credit[k] * len(turn) for k, turn in enumerate(turns)) / weight if weight else 0.0
        value = dict.fromkeys(cols, 0.0)
        for k, turn in enumerate(turns):
            for t in turn:
                value[t] = level + config.beta * (credit[k] - center)
        out.append([value[t] if weight else level for t in cols])
    return to_tensor(batch, rows, out)


def _anchor(batch: RolloutBatch, row: int) -> list[tuple]:
    """Per assistant turn of `row`: ("prompt",) for the first, else the ids between it and the turn before."""
    turns = batch.turns[row] if batch.turns is not None else []
    spans = [(s, e) for role, s, e in turns if role == "assistant"] if turns else [(0, batch.T)]
    ids = batch.token_ids[row].tolist()
    return [("prompt",) if k == 0 else ("obs", *ids[spans[k - 1][1] : s]) for k, (s, _) in enumerate(spans)]


def _normalized(value: float, mates: list[float], singleton_mean: float, config) -> float:
    if len(mates) == 1:
        mean, std = singleton_mean, 1.0
    else:
        mean = sum(mates) / len(mates)
        std = math.sqrt(sum((m - mean) ** 2 for m in mates) / (len(mates) - 1))
    return (value - mean) / (std + config.epsilon) if config.mode == "mean_std_norm" else value - mean


@twin("gigpo")
def gigpo_twin(batch: RolloutBatch, config) -> torch.Tensor:
    rows = real_columns(batch)
    R = batch.scores[config.channel].tolist()
    groups = batch.group_ids.tolist()
    steps = []  # (row, k, group, anchor, R, return)
    for i in range(batch.B):
        if math.isnan(R[i]):
            continue
        keys = _anchor(batch, i)
        for k, key in enumerate(keys):
            steps.append((i, k, groups[i], key, R[i], config.gamma ** (len(keys) - 1 - k) * R[i]))
    value = {}
    for i, k, g, key, r, ret in steps:
        episode = _normalized(r, [s[4] for s in steps if s[2] == g], 0.0, config)
        step = _normalized(ret, [s[5] for s in steps if s[2] == g and s[3] == key], ret, config)
        value[i, k] = episode + config.step_advantage_w * step
    out = []
    for i, cols in enumerate(rows):
        turns = _turn_columns(batch, i, cols)
        per_col = dict.fromkeys(cols, 0.0)
        for k, turn in enumerate(turns):
            for t in turn:
                per_col[t] = value.get((i, k), 0.0)
        out.append([per_col[t] for t in cols])
    return to_tensor(batch, rows, out)
