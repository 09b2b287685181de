"""How one predictor of token credit is scored against the Monte Carlo teacher's segments: the
segments of the valued rollouts, an estimator's segment sums, and every teacher-bench metric of them
(`backend.evaluation.teacher_bench` runs them over every estimator).

Metrics (each with its stderr over rollouts, `_se`, and by a bootstrap over groups, `_se_group`: rollouts
of a group share a baseline, `backend.evaluation.bench_stats`; DEFINITIONS says which direction is better):
- spearman: Spearman of S against Δ pooled over every segment of the run; stderr by bootstrap over
  rollouts (200 resamples, seed 0);
- ranking_accuracy (VinePPO's step ranking): per rollout, over pairs of its segments with different
  Δ, the share with (Δ_i − Δ_j)(S_i − S_j) > 0, a tie in S counting one half; mean over rollouts;
- sign_accuracy: segments with |Δ| > 2 stderr ("clearly non-zero"): share with sign S = sign Δ
  (S = 0 counts one half); per rollout, mean over rollouts;
- critical_hit1 / critical_hit3 ("Critical Tokens Matter"): in incorrect rollouts (R <= 0) whose
  first valued prefix can still succeed, the critical segment is the one after which every
  continuation fails (the first k with V̂(p_k) = 0, segment k − 1): is it among the estimator's 1 (3)
  most negative segments?;
- cliff_hit1 (Cliff Tokens, `backend.evaluation.cliff_tokens`): in rollouts with a cliff (the first valued
prefix
  whose success rate falls by the official one-sided z-test), does the estimator's most negative token
  sit in the cliff's segment (the cliff token itself when every position is valued)? Ties share the hit;
- first_wrong_hit1 (needs a process channel, `creditlens verify-steps`): in failed rollouts with a wrong
  step, is the first wrong step (a line) the estimator's most negative one
  (`backend.evaluation.first_wrong_step`)?;
- value_mse / value_corr, for the value sources zero, stored, fitted and prefix_tree (gae's V in Z
  units) against V̂ mapped to Z units the way suffix_mc maps it (group centre and scale): mean per
  rollout squared error, and the Pearson correlation pooled (bootstrap stderr).
- ranking_accuracy_per_token, sign_accuracy_wilson (`backend.evaluation.fair_metrics`): the same on per-token
means
  (segment length cannot win), and with Wilson stderrs where all M suffixes agree (stderr 0 otherwise);
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd
import torch

from backend.core.ranks import spearman
from backend.evaluation import bench_stats as stats
from backend.evaluation import cliff_tokens
from backend.evaluation import fair_metrics as fair
from backend.evaluation import first_wrong_step as fws

METRICS = (
    "spearman",
    "ranking_accuracy",
    "ranking_accuracy_per_token",
    "sign_accuracy",
    "sign_accuracy_wilson",
    "critical_hit1",
    "critical_hit3",
    "cliff_hit1",
    "first_wrong_hit1",
    "value_mse",
    "value_corr",
)
DEFINITIONS = {
    "spearman": "Spearman of the estimator's segment sums vs the MC segment advantages, pooled "
    "(higher is better; chance 0)",
    "ranking_accuracy": "share of segment pairs in a rollout ordered as the teacher orders them "
    "(higher is better; chance 0.5)",
    "ranking_accuracy_per_token": "ranking_accuracy on per-token means (segment sum / its trained tokens): "
    "segment length cannot win it (higher is better; chance 0.5)",
    "sign_accuracy": "share of clearly non-zero MC segments (|Δ| > 2 se) whose sign the estimator gets "
    "(higher is better; chance 0.5)",
    "sign_accuracy_wilson": "sign_accuracy where a position whose M suffixes all agree has the Wilson "
    "stderr, not 0 (higher is better; chance 0.5)",
    "critical_hit1": "incorrect rollouts: the critical segment is the estimator's most negative "
    "(higher is better; chance 1/segments)",
    "critical_hit3": "… among its 3 most negative (higher is better; chance 3/segments)",
    "cliff_hit1": "rollouts with a cliff token (Cliff Tokens' z-test on the teacher's success rates): the "
    "estimator's most negative token is in the first cliff's segment, ties shared (higher is "
    "better; chance segment / tokens)",
    "first_wrong_hit1": "failed rollouts with a wrong step (process channel): the first wrong line is the "
    "estimator's most negative line, ties shared (higher is better; chance 1/lines)",
    "value_mse": "value sources: mean squared error of V vs V̂ in Z units (lower is better)",
    "value_corr": "value sources: Pearson correlation of V vs V̂ (higher is better)",
}
SEGMENT_METRICS = (
    "spearman",
    "ranking_accuracy",
    "ranking_accuracy_per_token",
    "sign_accuracy",
    "sign_accuracy_wilson",
    "critical_hit1",
    "critical_hit3",
)
CLIFF_METRICS = ("cliff_hit1",)
"""Judged on the first cliff token of each rollout that has one (tokens, not segment sums)."""
STEP_METRICS = ("first_wrong_hit1",)
"""Judged on the process channel's wrong steps, not on the teacher's segments."""
RANKED_METRICS = SEGMENT_METRICS + CLIFF_METRICS + STEP_METRICS
VALUE_METRICS = ("value_mse", "value_corr")
PER_ROLLOUT = (
    "ranking_accuracy",
    "ranking_accuracy_per_token",
    "sign_accuracy",
    "sign_accuracy_wilson",
    "critical_hit1",
    "critical_hit3",
    "cliff_hit1",
    "first_wrong_hit1",
)
"""Metrics that have a value per rollout (the Oracle view lists the rollouts where they miss)."""


@dataclass
class Segments:
    """The teacher's segments of the valued rollouts, flat over the run.

    rollout: (S,) rollout id; start, end: (S,) token range; delta, delta_se: (S,) MC advantage and its
    stderr; index: (S,) k within its rollout. Per rollout (dict by id): critical segment k or None.
    """

    rollout: np.ndarray
    start: np.ndarray
    end: np.ndarray
    delta: np.ndarray
    delta_se: np.ndarray
    index: np.ndarray
    critical: dict[int, int | None]
    n_positions: int
    delta_se_wilson: np.ndarray | None = None
    """(S,) the stderr of Δ with `fair_metrics.wilson_se` at each position (None without suffix counts)."""
    group_of: dict[int, int] = field(default_factory=dict)
    """rollout id -> group id, for the `_se_group` stderrs (a rollout missing here is its own group)."""
    trained: np.ndarray | None = None
    """(S,) the segment's trained tokens (its length without an agent run's tool tokens, which no estimator
    credits); None: every token is trained."""

    @cached_property
    def pairs(self) -> fair.BlockPairs:
        """The within-rollout segment pairs (built once: every predictor is scored on the same layout)."""
        return fair.BlockPairs(self.rollout)


def teacher_segments(
    values: pd.DataFrame,
    lengths: dict[int, int],
    outcomes: dict[int, float],
    group_of: dict[int, int] | None = None,
    loss_masks: dict[int, np.ndarray] | None = None,
) -> Segments:
    """values: rows (rollout_id, pos, value, stderr) from `Store.resample_values`; lengths, outcomes and
    groups by rollout id; loss_masks: an agent run's (L,) masks by rollout id (the per-token metric divides a
    segment's sum by its trained tokens). Positions at or past a response's end are ignored."""
    cols: dict[str, list] = {
        k: [] for k in ("rollout", "start", "end", "delta", "delta_se", "index", "delta_se_wilson")
    }
    critical: dict[int, int | None] = {}
    n_positions = 0
    for rid, part in values.groupby("rollout_id", sort=True):
        rid = int(rid)
        if rid not in lengths:
            continue
        L = lengths[rid]
        part = part[(part["pos"] >= 0) & (part["pos"] < L)].sort_values("pos")
        if part.empty:
            continue
        n_positions += len(part)
        pos = part["pos"].to_numpy(np.int64)
        v = np.append(part["value"].to_numpy(np.float64), outcomes[rid])
        se = np.append(np.nan_to_num(part["stderr"].to_numpy(np.float64)), 0.0)
        counts = part["n"].to_numpy(np.float64) if "n" in part else np.full(len(part), np.inf)
        se_w = np.append(fair.wilson_se(part["value"].to_numpy(np.float64), counts, se[:-1]), 0.0)
        ends = np.append(pos[1:], L)
        for k in range(len(pos)):
            cols["rollout"].append(rid)
            cols["start"].append(pos[k])
            cols["end"].append(ends[k])
            cols["delta"].append(v[k + 1] - v[k])
            cols["delta_se"].append(math.hypot(se[k], se[k + 1]))
            cols["delta_se_wilson"].append(math.hypot(se_w[k], se_w[k + 1]))
            cols["index"].append(k)
        critical[rid] = None
        if outcomes[rid] <= 0 and v[0] > 0:
            first_dead = int(np.flatnonzero(v <= 0)[0])  # v[-1] = R <= 0, so there is one
            critical[rid] = first_dead - 1
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    trained = None
    if loss_masks is not None:  # a tool turn in a segment would lower its per-token mean by its length alone
        spans = zip(arrays["rollout"], arrays["start"], arrays["end"], strict=True)
        trained = np.array([int(np.sum(loss_masks[int(r)][a:b])) for r, a, b in spans], dtype=np.int64)
    return Segments(
        critical=critical, n_positions=n_positions, group_of=dict(group_of or {}), trained=trained, **arrays
    )


def segment_sums(segments: Segments, advantages: dict[int, np.ndarray]) -> np.ndarray:
    """S: (S,) the estimator's advantage summed over each segment."""
    out = np.zeros(len(segments.rollout), dtype=np.float64)
    for i, (rid, a, b) in enumerate(zip(segments.rollout, segments.start, segments.end, strict=True)):
        out[i] = float(np.sum(advantages[int(rid)][a:b], dtype=np.float64))
    return out


def per_rollout_metrics(segments: Segments, sums: np.ndarray) -> pd.DataFrame:
    """rollout_id, ranking_accuracy, sign_accuracy, critical_hit1, critical_hit3 (NaN where a rollout
    has nothing to judge)."""
    pairs = segments.pairs
    d = segments.delta
    lengths = np.maximum(1, segments.end - segments.start if segments.trained is None else segments.trained)
    sign_wilson = (
        pairs.sign_hits(d, sums, segments.delta_se_wilson)
        if segments.delta_se_wilson is not None
        else np.full(len(pairs.blocks), math.nan)
    )
    rollout_ids = [int(segments.rollout[idx[0]]) for idx in pairs.blocks]
    hit1, hit3 = critical_hits(segments, pairs.blocks, rollout_ids, sums)
    frame = {
        "rollout_id": rollout_ids,
        "ranking_accuracy": pairs.pair_ranking(d, sums),
        "ranking_accuracy_per_token": pairs.pair_ranking(d, sums / lengths),
        "sign_accuracy": pairs.sign_hits(d, sums, segments.delta_se),
        "sign_accuracy_wilson": sign_wilson,
        "critical_hit1": hit1,
        "critical_hit3": hit3,
        "segments": [len(idx) for idx in pairs.blocks],
    }
    return pd.DataFrame(frame, columns=["rollout_id", *SEGMENT_METRICS[1:], "segments"])


def critical_hits(
    segments: Segments, blocks: list[np.ndarray], rollout_ids: list[int], sums: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """(R,) whether each rollout's critical segment is its most negative sum, and among its 3 most
    negative (NaN without a critical segment)."""
    hit1 = np.full(len(blocks), math.nan)
    hit3 = np.full(len(blocks), math.nan)
    for k, (idx, rid) in enumerate(zip(blocks, rollout_ids, strict=True)):
        crit = segments.critical.get(rid)
        if crit is not None:
            order = np.argsort(sums[idx], kind="stable")  # most negative first
            hit1[k] = float(crit in order[:1])
            hit3[k] = float(crit in order[:3])
    return hit1, hit3


def score_sums(segments: Segments, sums: np.ndarray) -> tuple[dict[str, float], pd.DataFrame]:
    """Every segment metric of one predictor (with `_se`), and its per-rollout frame."""
    per = per_rollout_metrics(segments, sums)
    out: dict[str, float] = {}

    def pooled(idx):
        return spearman(torch.from_numpy(sums[idx]), torch.from_numpy(segments.delta[idx]))

    out["spearman"] = pooled(np.arange(len(sums))) if len(sums) > 1 else math.nan
    out["spearman_se"] = stats.bootstrap_se(pooled, stats.consecutive_blocks(segments.rollout))
    by_group = stats.group_blocks(segments.rollout, segments.group_of)
    out["spearman_se_group"] = stats.bootstrap_se(pooled, by_group)
    for m in SEGMENT_METRICS[1:]:
        out[m], out[f"{m}_se"] = stats.mean_se(per[m].tolist())
        out[f"{m}_se_group"] = stats.group_mean_se(per[m], per["rollout_id"], segments.group_of)
    return out, per


def score_advantages(
    segments: Segments,
    truth: fws.StepTruth,
    advantages: dict[int, np.ndarray],
    cliffs: cliff_tokens.CliffTruth | None = None,
) -> tuple[dict[str, float], pd.DataFrame]:
    """`score_sums` of the advantages' segment sums, plus first_wrong_hit1 and (given `cliffs`) cliff_hit1
    (each with its `_se`, and a column of the per-rollout frame)."""
    metrics, per = score_sums(segments, segment_sums(segments, advantages))
    if cliffs is not None:
        hits = cliff_tokens.most_negative_hits(cliffs.cliffs, advantages, cliffs.judged_from)
        metrics["cliff_hit1"], metrics["cliff_hit1_se"] = stats.mean_se(list(hits.values()))
        metrics["cliff_hit1_se_group"] = stats.group_mean_se(
            list(hits.values()), list(hits), segments.group_of
        )
        per["cliff_hit1"] = per["rollout_id"].map(hits).astype(float)
    hits = fws.step_hits(truth, advantages)
    metrics["first_wrong_hit1"], metrics["first_wrong_hit1_se"] = stats.mean_se(list(hits.values()))
    metrics["first_wrong_hit1_se_group"] = stats.group_mean_se(
        list(hits.values()), list(hits), segments.group_of
    )
    per["first_wrong_hit1"] = per["rollout_id"].map(hits).astype(float)
    return metrics, per


def chance_row(
    segments: Segments, truth: fws.StepTruth | None = None, cliffs: cliff_tokens.CliffTruth | None = None
) -> dict[str, float]:
    """What a predictor with no information scores: 0, 1/2, 1/2, min(K, n)/n per judged rollout (n
    segments), the cliff segment's share of the judged tokens, and 1/n (n lines)."""
    counts = pd.Series(segments.index).groupby(segments.rollout).size()
    judged = [int(counts[r]) for r, c in segments.critical.items() if c is not None]
    row = {
        "spearman": 0.0,
        "ranking_accuracy": 0.5,
        "ranking_accuracy_per_token": 0.5,
        "sign_accuracy": 0.5,
        "sign_accuracy_wilson": 0.5,
    }
    for k in (1, 3):
        row[f"critical_hit{k}"], row[f"critical_hit{k}_se"] = stats.mean_se([min(k, n) / n for n in judged])
    if cliffs is not None:
        shares = cliff_tokens.chance_hits(cliffs.cliffs, cliffs.lengths, cliffs.judged_from)
        row["cliff_hit1"], row["cliff_hit1_se"] = stats.mean_se(list(shares.values()))
    if truth is not None:
        chance = fws.chance_hits(truth, segments.rollout.tolist())
        row["first_wrong_hit1"], row["first_wrong_hit1_se"] = stats.mean_se(list(chance.values()))
    return row
