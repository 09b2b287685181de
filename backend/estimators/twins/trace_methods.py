"""Twin of trace_methods.py: GRPO-λ's per-token gradient weights, summed from the trace definition.

For each response, token j (0-based among its real tokens) gets Σ_{t ≥ j} tr(t, t − j), with tr taken
straight from Eq. 2 (no closed form), times the clamped group-normalized advantage.
"""

from __future__ import annotations

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.twins.loops import outcome_of, real_columns, to_tensor


def trace_weight(t: int, lag: int, d: float, weighting: str) -> float:
    """tr(t, l) of Eq. 2 for 0-based t and lag l <= t: d^l (recent) or max(d^l, d^(t - l)) (both)."""
    recent = d**lag
    return recent if weighting == "recent" else max(recent, d ** (t - lag))


@twin("log_ratio_trace")
def log_ratio_trace_twin(batch: RolloutBatch, config) -> torch.Tensor:
    rows = real_columns(batch)
    d = config.trace_gamma * config.trace_lam
    per_row = []
    for z, cols in zip(outcome_of(batch, config), rows, strict=True):
        if config.clamp_negative and z < config.floor:
            z = config.floor
        L = len(cols)
        per_row.append(
            [z * sum(trace_weight(t, t - j, d, config.weighting) for t in range(j, L)) for j in range(L)]
        )
    return to_tensor(batch, rows, per_row)
