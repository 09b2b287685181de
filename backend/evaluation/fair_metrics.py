"""Teacher-bench metrics that a trivial feature cannot win, beside the classic ones.

- Segment length: a segment sum S_k = Σ A_t grows with the segment's length, so a predictor that spreads
  one number over every token (broadcast GRPO) ranks long segments first and wins a little on
  `ranking_accuracy` by length alone. `ranking_accuracy_per_token` ranks the per-token means S_k / len_k
  instead (broadcast GRPO is exactly at chance: every segment of a rollout has the same mean).
- Positions where all M suffixes agree have a sample stderr of 0, so |Δ| > 2 se calls any difference
  "clear". `wilson_se` gives such a position the stderr of the Wilson-centred proportion
  (p̃ = (k + z²/2) / (M + z²), se = sqrt(p̃(1 − p̃) / (M + z²)), z = 2), never below the sample stderr;
  `sign_accuracy_wilson` judges only segments clear under it.
- The shuffled sanity row permutes each rollout's segment sums among its segments (the layout and every
  segment's length kept, each segment's tokens sharing its new sum evenly), so it is at chance on the
  within-rollout rankings by construction (permuting tokens instead kept the length signal). It keeps each
  rollout's level, so its pooled spearman and its sign_accuracy measure what the level alone (the outcome
  known to every outcome-based estimator) earns: the floor a token-level method has to beat.
"""

from __future__ import annotations

import math

import numpy as np

WILSON_Z = 2.0


def wilson_se(value: np.ndarray, n: np.ndarray, stderr: np.ndarray, z: float = WILSON_Z) -> np.ndarray:
    """value, n, stderr: (P,) V̂, suffix count and sample stderr per position -> (P,) honest stderr (the
    sample stderr where the count is unknown: n = inf)."""
    n = np.asarray(n, dtype=np.float64)
    stderr = np.nan_to_num(np.asarray(stderr, dtype=np.float64))
    known = np.isfinite(n)
    m = np.where(known, n, 1.0)
    center = (np.asarray(value, dtype=np.float64) * m + z * z / 2) / (m + z * z)
    return np.where(known, np.maximum(stderr, np.sqrt(center * (1 - center) / (m + z * z))), stderr)


def ties(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.isclose(a, b, rtol=1e-6, atol=1e-9)


def pair_ranking(d: np.ndarray, s: np.ndarray) -> float:
    """Share of pairs with different Δ ordered as Δ orders them (a tie in s counts one half); NaN if none."""
    i, j = np.triu_indices(len(d), k=1)
    judged = d[i] != d[j]
    if not judged.any():
        return math.nan
    agree = ((d[i] - d[j]) * (s[i] - s[j]) > 0) & ~ties(s[i], s[j])
    return float(np.mean(np.where(ties(s[i], s[j]), 0.5, agree.astype(float))[judged]))


def sign_hits(d: np.ndarray, s: np.ndarray, se: np.ndarray) -> float:
    """Sign agreement over segments with |Δ| > 2 se (s = 0 counts one half); NaN if none is clear."""
    clear = (d != 0) & (np.abs(d) > 2 * se)
    if not clear.any():
        return math.nan
    hits = np.where(ties(s, 0.0), 0.5, (np.sign(s) == np.sign(d)).astype(float))
    return float(hits[clear].mean())


class BlockPairs:
    """Every within-block pair (i < j) of items laid out in consecutive blocks (a rollout's segments), so a
    per-block metric is one vectorized pass over the run instead of a call per rollout.

    blocks: (B,) the index arrays of the non-empty blocks, in order; i, j: (P,) item indices of each pair;
    pair_block: (P,) its block's number.
    """

    def __init__(self, keys: np.ndarray):
        bounds = np.flatnonzero(np.diff(keys)) + 1
        self.blocks = [b for b in np.split(np.arange(len(keys)), bounds) if len(b)]
        self.item_block = np.zeros(len(keys), dtype=np.int64)
        pairs_i, pairs_j, pair_block = [], [], []
        for k, block in enumerate(self.blocks):
            self.item_block[block] = k
            i, j = np.triu_indices(len(block), k=1)
            pairs_i.append(block[i])
            pairs_j.append(block[j])
            pair_block.append(np.full(len(i), k, dtype=np.int64))
        empty = np.zeros(0, dtype=np.int64)
        self.i = np.concatenate(pairs_i) if pairs_i else empty
        self.j = np.concatenate(pairs_j) if pairs_j else empty
        self.pair_block = np.concatenate(pair_block) if pair_block else empty

    def block_mean(self, block: np.ndarray, values: np.ndarray, judged: np.ndarray) -> np.ndarray:
        """(B,) mean of `values[judged]` per block (`block`: each value's block number); NaN for none.
        The values are 0, 1/2 or 1, so the sums are exact and equal np.mean's."""
        n = np.bincount(block[judged], minlength=len(self.blocks)).astype(np.float64)
        total = np.bincount(block[judged], weights=values[judged], minlength=len(self.blocks))
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(n > 0, total / n, math.nan)

    def pair_ranking(self, d: np.ndarray, s: np.ndarray) -> np.ndarray:
        """(B,) `pair_ranking(d[block], s[block])` of every block."""
        i, j = self.i, self.j
        tied = ties(s[i], s[j])
        agree = ((d[i] - d[j]) * (s[i] - s[j]) > 0) & ~tied
        return self.block_mean(self.pair_block, np.where(tied, 0.5, agree.astype(float)), d[i] != d[j])

    def sign_hits(self, d: np.ndarray, s: np.ndarray, se: np.ndarray) -> np.ndarray:
        """(B,) `sign_hits(d[block], s[block], se[block])` of every block."""
        clear = (d != 0) & (np.abs(d) > 2 * se)
        hits = np.where(ties(s, 0.0), 0.5, (np.sign(s) == np.sign(d)).astype(float))
        return self.block_mean(self.item_block, hits, clear)


def segment_shuffle(
    rollout: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    sums: np.ndarray,
    advantages: dict[int, np.ndarray],
    seed: int = 0,
) -> dict[int, np.ndarray]:
    """Token advantages whose segment sums are `sums` permuted within each rollout (segments: flat (S,)
    rollout, start, end as in `teacher_segments.Segments`); tokens outside every segment keep theirs."""
    rng = np.random.default_rng(seed)
    out = {int(r): np.array(a, dtype=np.float64, copy=True) for r, a in advantages.items()}
    bounds = np.flatnonzero(np.diff(rollout)) + 1
    for idx in np.split(np.arange(len(rollout)), bounds):
        if len(idx) == 0:
            continue
        moved = sums[idx][rng.permutation(len(idx))]
        tokens = out[int(rollout[idx[0]])]
        for k, total in zip(idx, moved, strict=True):
            tokens[start[k] : end[k]] = total / max(1, end[k] - start[k])
    return out
