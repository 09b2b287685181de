"""Twins of credit.py: each credit operator's weights token by token, then Z redistributed by them.

t is the 1-based position among the L real tokens of a response; H_t its entropy (clamped at 0).
"""

from __future__ import annotations

import re

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.twins.common import finish_rewards_loop, redistribute_loop
from backend.estimators.twins.loops import entropy_rows, outcome_of, quantile, real_columns, to_tensor


def _lengths(batch: RolloutBatch) -> list[int]:
    return [len(cols) for cols in real_columns(batch)]


@twin("terminal_gae")
def terminal_gae_twin(batch: RolloutBatch, config) -> torch.Tensor:
    weights = [[1.0 if t == L else 0.0 for t in range(1, L + 1)] for L in _lengths(batch)]
    return redistribute_loop(batch, config, weights)


@twin("recency")
def recency_twin(batch: RolloutBatch, config) -> torch.Tensor:
    weights = [[config.kappa ** (L - t) for t in range(1, L + 1)] for L in _lengths(batch)]
    return redistribute_loop(batch, config, weights)


@twin("early_late")
def early_late_twin(batch: RolloutBatch, config) -> torch.Tensor:
    weights = [
        [config.kappa ** (t - 1) + config.kappa ** (L - t) for t in range(1, L + 1)] for L in _lengths(batch)
    ]
    return redistribute_loop(batch, config, weights)


@twin("entropy")
def entropy_twin(batch: RolloutBatch, config) -> torch.Tensor:
    H = entropy_rows(batch, real_columns(batch))
    return redistribute_loop(batch, config, [[h**config.p for h in row] for row in H])


@twin("step_boundary")
def step_boundary_twin(batch: RolloutBatch, config) -> torch.Tensor:
    weights = []
    for i, L in enumerate(_lengths(batch)):
        texts = batch.tokens[i] if batch.tokens is not None else [""] * L
        weights.append([1.0 if k + 1 == L or re.search(config.pattern, texts[k]) else 0.0 for k in range(L)])
    return redistribute_loop(batch, config, weights)


def trace_weights(batch: RolloutBatch, config, entropy_masked: bool) -> list[list[float]]:
    """d^(L-t) with d = trace_gamma trace_lam (mode 'both': the mean with d^(t-1)); with `entropy_masked`,
    0 on tokens whose entropy is below the response's q-quantile."""
    d = config.trace_gamma * config.trace_lam
    H = entropy_rows(batch, real_columns(batch)) if entropy_masked else None
    out = []
    for i, L in enumerate(_lengths(batch)):
        row = []
        for t in range(1, L + 1):
            x = d ** (L - t)
            if config.mode == "both":
                x = 0.5 * (x + d ** (t - 1))
            if entropy_masked:
                x *= 1.0 if H[i][t - 1] >= quantile(H[i], config.q) else 0.0
            row.append(x)
        out.append(row)
    return out


@twin("decaying_trace")
def decaying_trace_twin(batch: RolloutBatch, config) -> torch.Tensor:
    return redistribute_loop(batch, config, trace_weights(batch, config, entropy_masked=False))


@twin("entropy_masked_trace")
def entropy_masked_trace_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """The masked trace's shares L w_t / sum w, capped at `cap`, then divided by L (the cap may leave
    sum_t r_t below Z)."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    r_rows = []
    for i, w in enumerate(trace_weights(batch, config, entropy_masked=True)):
        L = len(w)
        if not sum(w) > 0:
            w = [1.0] * L
        total = sum(w)
        r_rows.append([z[i] * min(L * x / total, config.cap) / L for x in w])
    return finish_rewards_loop(batch, config, z, rows, r_rows)


@twin("entropy_mix")
def entropy_mix_twin(batch: RolloutBatch, config) -> torch.Tensor:
    weights = []
    for row in entropy_rows(batch, real_columns(batch)):
        mean_h = sum(row) / len(row) if row else 0.0
        weights.append([1.0 if mean_h <= 0 else 1 - config.alpha + config.alpha * h / mean_h for h in row])
    return redistribute_loop(batch, config, weights)


@twin("high_entropy_mask")
def high_entropy_mask_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """Z on tokens at or above the entropy q-quantile (of the response or of the batch), 0 elsewhere."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    H = entropy_rows(batch, rows)
    if config.quantile_over == "batch":
        every = [h for row in H for h in row]
        thresholds = [quantile(every, config.q) if every else float("inf")] * len(rows)
    else:
        thresholds = [quantile(h, config.q) if h else float("inf") for h in H]
    return to_tensor(
        batch, rows, [[z[i] if h >= thresholds[i] else 0.0 for h in H[i]] for i in range(len(rows))]
    )
