"""Twins of entropy_methods.py: pivot_buckets, divergence_progress and asymmetric_confidence as plain loops.

Windows and their statistics are dicts keyed by (group id, window); positions are counted over each
response's real tokens, as in the fast path.
"""

from __future__ import annotations

import math
from collections import defaultdict

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import entropy_rows, outcome_of, quantile, real_columns, to_tensor


def _gates(batch: RolloutBatch, rows: list[list[int]], config) -> list[list[float]]:
    """g = 1 + alpha on tokens at or above their response's q-quantile entropy, 1 elsewhere."""
    out = []
    for H in entropy_rows(batch, rows):
        threshold = quantile(H, config.q) if H else 0.0
        out.append([1.0 + config.alpha if h >= threshold else 1.0 for h in H])
    return out


def _window(progress: float, windows: int) -> int:
    return min(math.floor(windows * progress), windows - 1)


@twin("pivot_buckets")
def pivot_buckets_twin(batch: RolloutBatch, config) -> torch.Tensor:
    rows, z = real_columns(batch), outcome_of(batch, config)
    gates = _gates(batch, rows, config)
    cells: dict = defaultdict(list)
    keys = []
    for i, cols in enumerate(rows):
        L = len(cols)
        keys.append([(int(batch.group_ids[i]), k * config.windows // L) for k in range(L)])
        for k, key in enumerate(keys[i]):
            cells[key].append(gates[i][k])
    mean_gate = {key: sum(values) / len(values) for key, values in cells.items()}
    per_row = [
        [
            z[i] * ((1 - config.anchor) + config.anchor * gates[i][k] / mean_gate[key])
            for k, key in enumerate(keys[i])
        ]
        for i in range(len(rows))
    ]
    return to_tensor(batch, rows, per_row)


@twin("divergence_progress")
def divergence_progress_twin(batch: RolloutBatch, config) -> torch.Tensor:
    rows, z = real_columns(batch), outcome_of(batch, config)
    gates = _gates(batch, rows, config)
    scores = batch.scores[config.channel].tolist()
    cells: dict = defaultdict(list)
    keys, divergences = [], []
    for i, (cols, H) in enumerate(zip(rows, entropy_rows(batch, rows), strict=True)):
        total, spent, row_keys = sum(H), 0.0, []
        for k, h in enumerate(H):
            window = _window(spent / total, config.windows) if total > 0 else k * config.windows // len(H)
            row_keys.append((int(batch.group_ids[i]), window))
            spent += h
        d = [float(batch.logprobs[i, t]) - float(batch.ref_logprobs[i, t]) for t in cols]
        for key, value in zip(row_keys, d, strict=True):
            cells[key].append(value)
        keys.append(row_keys)
        divergences.append(d)
    stats = {}
    for key, values in cells.items():
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / (len(values) - 1)) if len(values) > 1 else 0.0
        stats[key] = (mean, std)
    per_row = []
    for i in range(len(rows)):
        row = []
        for k, key in enumerate(keys[i]):
            mean, std = stats[key]
            s = (divergences[i][k] - mean) / (std + config.signal_epsilon) if std > 0 else 0.0
            s = min(max(s, -config.signal_clip), config.signal_clip)
            row.append(0.0 if math.isnan(scores[i]) else gates[i][k] * (z[i] + config.lam * s))
        per_row.append(row)
    return to_tensor(batch, rows, per_row)


@twin("asymmetric_confidence")
def asymmetric_confidence_twin(batch: RolloutBatch, config) -> torch.Tensor:
    rows, z = real_columns(batch), outcome_of(batch, config)
    per_row = []
    for i, cols in enumerate(rows):
        w = []
        for t in cols:
            p = min(math.exp(float(batch.logprobs[i, t])), 1.0)
            u = -sum(x * math.log(x) for x in (p, 1.0 - p) if x > 0) / math.log(2.0)
            u = min(max(u, 0.0), 1.0)
            confidence = 1.0 - u if p >= 0.5 else 0.0
            w.append(
                1.0 + config.alpha * u if z[i] > 0 else 1.0 + config.alpha * confidence if z[i] < 0 else 1.0
            )
        mean_w = sum(w) / len(w) if w else 1.0
        per_row.append([z[i] * (x / mean_w if config.keep_total else x) for x in w])
    return to_tensor(batch, rows, per_row)
