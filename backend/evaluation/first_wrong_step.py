"""The first wrong step as ground truth for credit: does an estimator put its most negative credit on
the step where a failed response first went wrong? (teacher-bench's `first_wrong_hit1`)

Steps are lines (newline-ended, as `step_ends` finds them; the last token ends the last one). The
process channel marks wrong steps with a negative token reward at the step's end (`creditlens
verify-steps`, the demo run's `arithmetic_steps`); the first wrong step is the line holding the first
negative process reward. Judged: failed rollouts (outcome <= 0) with a wrong step. An estimator's
credit on a step is its advantage summed over the step's tokens (like the teacher's segments); it hits
when the first wrong step has the most negative sum. Steps tied at the minimum share the hit (1/ties),
so a flat prediction scores the chance value 1/steps rather than whatever the order picks.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from backend.core.batch import RolloutBatch
from backend.estimators.token_helpers import step_ends


@dataclass
class StepTruth:
    """bounds: rollout id -> (n + 1,) token offsets, step k is [bounds[k], bounds[k + 1]);
    first_wrong: rollout id -> index of its first wrong step (judged rollouts only)."""

    bounds: dict[int, np.ndarray]
    first_wrong: dict[int, int]


def step_truth(batch: RolloutBatch, outcome_channel: str = "task", channel: str = "process") -> StepTruth:
    """The judged rollouts of `batch` (none when it has no token rewards on `channel`)."""
    truth = StepTruth({}, {})
    local = batch.token_rewards.get(channel)
    if local is None or outcome_channel not in batch.scores:
        return truth
    ends, _ = step_ends(batch, r"\n")  # (B, T) bool
    ends, local = ends.cpu().numpy(), local.cpu().numpy()
    outcome = batch.scores[outcome_channel].cpu().numpy()
    for i, (rid, L) in enumerate(zip(batch.rollout_ids.tolist(), batch.lengths.tolist(), strict=True)):
        wrong = np.flatnonzero(local[i, :L] < 0)
        if not outcome[i] <= 0 or not len(wrong):  # NaN outcomes are not judged either
            continue
        step_end = np.flatnonzero(ends[i, :L])  # last token of each step
        truth.bounds[int(rid)] = np.concatenate([[0], step_end + 1])
        truth.first_wrong[int(rid)] = int(np.searchsorted(step_end, wrong[0]))  # first end at or after it
    return truth


def step_hits(truth: StepTruth, advantages: dict[int, np.ndarray]) -> dict[int, float]:
    """rollout id -> hit (1, 0, or 1/ties) for the judged rollouts that `advantages` covers."""
    hits = {}
    for rid, k in truth.first_wrong.items():
        if rid not in advantages:
            continue
        b = truth.bounds[rid]
        sums = np.add.reduceat(np.asarray(advantages[rid][: b[-1]], dtype=np.float64), b[:-1])  # (steps,)
        lowest = np.isclose(sums, sums.min(), rtol=1e-6, atol=1e-9)
        hits[rid] = float(lowest[k]) / float(lowest.sum())
    return hits


def chance_hits(truth: StepTruth, rollouts) -> dict[int, float]:
    """What a predictor with no information scores per judged rollout: 1 / its number of steps."""
    return {r: 1.0 / (len(truth.bounds[r]) - 1) for r in truth.first_wrong if r in set(rollouts)}
