"""Stderrs of the teacher-bench metrics: over rollouts (each `_se`) and by a bootstrap over groups (each
`_se_group`).

The rollouts of a group answer one prompt and share a baseline (GRPO's group mean, RLOO's leave-one-out
mean), so their errors move together: a stderr that treats them as independent understates how much a
metric would move on another draw of prompts. The group bootstrap resamples whole groups with replacement
(BOOTSTRAP draws, seeded) and recomputes the metric on the rollouts drawn. With one rollout per group it is
the bootstrap over rollouts; with k identical rollouts per group it is sqrt(k) times the stderr over
rollouts (tests/backend/test_bench_stats.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

BOOTSTRAP = 200
SEED = 0


def mean_se(x) -> tuple[float, float]:
    """Mean and stderr (ddof 1) of the non-NaN values of `x`; NaN for none (the stderr for one)."""
    x = np.asarray([v for v in x if v == v], dtype=np.float64)
    if len(x) == 0:
        return math.nan, math.nan
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan


def consecutive_blocks(keys: np.ndarray) -> list[np.ndarray]:
    """Index blocks of equal consecutive `keys` (segments of one rollout are consecutive)."""
    return np.split(np.arange(len(keys)), np.flatnonzero(np.diff(keys)) + 1)


def group_blocks(rollouts: np.ndarray, group_of: Mapping[int, int]) -> list[np.ndarray]:
    """Index blocks of the items (segments, positions) whose rollouts share a group; a rollout missing from
    `group_of` is a group of its own."""
    keys = [group_of.get(int(r), ("rollout", int(r))) for r in rollouts]
    index: dict = {}
    for i, key in enumerate(keys):
        index.setdefault(key, []).append(i)
    return [np.asarray(v, dtype=np.int64) for v in index.values()]


def bootstrap_se(stat: Callable[[np.ndarray], float], blocks: list[np.ndarray], seed: int = SEED) -> float:
    """Stderr of `stat(indices)` when the blocks (of item indices) are resampled with replacement; NaN with
    fewer than 3 blocks."""
    if len(blocks) < 3:
        return math.nan
    rng = np.random.default_rng(seed)
    draws = []
    for _ in range(BOOTSTRAP):
        pick = rng.integers(0, len(blocks), len(blocks))
        v = stat(np.concatenate([blocks[k] for k in pick]))
        if v == v:
            draws.append(v)
    return float(np.std(draws, ddof=1)) if len(draws) > 1 else math.nan


def group_mean_se(
    values: np.ndarray, rollouts: np.ndarray, group_of: Mapping[int, int], seed: int = SEED
) -> float:
    """Stderr by a bootstrap over groups of the mean over rollouts of a per-rollout metric.

    values, rollouts: (R,) the metric (NaN: nothing judged) and the rollout id. The same draws as
    `bootstrap_se` over `group_blocks`, vectorized: weight (BOOTSTRAP, R) = how often each rollout's group
    was drawn.
    """
    values = np.asarray(values, dtype=np.float64)
    judged = ~np.isnan(values)
    blocks = group_blocks(np.asarray(rollouts)[judged], group_of)
    if len(blocks) < 3:
        return math.nan
    group_index = np.empty(int(judged.sum()), dtype=np.int64)
    for g, block in enumerate(blocks):
        group_index[block] = g
    rng = np.random.default_rng(seed)
    counts = np.stack(
        [
            np.bincount(rng.integers(0, len(blocks), len(blocks)), minlength=len(blocks))
            for _ in range(BOOTSTRAP)
        ]
    )  # (BOOTSTRAP, G)
    weight = counts[:, group_index].astype(np.float64)  # (BOOTSTRAP, R judged)
    means = weight @ values[judged] / weight.sum(axis=1)  # (BOOTSTRAP,)
    return float(np.std(means, ddof=1))
