"""Stderrs by a bootstrap over groups (`backend.evaluation.bench_stats`): groups of copies widen them by
sqrt(k), singleton groups give the bootstrap over rollouts, and the teacher-bench reports both."""

import math

import numpy as np
import pandas as pd
import pytest

from backend.evaluation import bench_stats as stats
from backend.evaluation.teacher_segments import score_sums, segment_sums, teacher_segments
from tests.backend.test_teacher_bench import ADVANTAGES, LENGTHS, OUTCOMES, VALUES


def test_groups_of_copies_widen_the_stderr_by_sqrt_k():
    rng = np.random.default_rng(1)
    per_group, k = rng.random(60), 8  # 60 groups of 8 identical rollouts: 60 independent draws, not 480
    values = np.repeat(per_group, k)
    rollouts = np.arange(len(values))
    group_of = {int(r): int(r) // k for r in rollouts}
    _, naive = stats.mean_se(values)
    grouped = stats.group_mean_se(values, rollouts, group_of)
    assert grouped / naive == pytest.approx(math.sqrt(k), rel=0.2)
    _, truth = stats.mean_se(per_group)
    assert grouped == pytest.approx(truth, rel=0.2)


def test_singleton_groups_are_the_bootstrap_over_rollouts():
    values = np.random.default_rng(2).random(200)
    values[::7] = np.nan  # nothing judged there: left out, not counted as zero
    rollouts = np.arange(200) + 1000
    alone = stats.group_mean_se(values, rollouts, {})
    same_draws = stats.bootstrap_se(
        lambda idx: float(np.mean(values[~np.isnan(values)][idx])),
        [np.array([i]) for i in range(int((~np.isnan(values)).sum()))],
    )
    assert alone == pytest.approx(same_draws, rel=1e-9)  # the vectorized draws are the looped ones
    assert alone == pytest.approx(stats.mean_se(values)[1], rel=0.2)
    assert math.isnan(stats.group_mean_se(values[:2], rollouts[:2], {}))  # fewer than 3 groups


def test_group_blocks_collect_scattered_members():
    blocks = stats.group_blocks(np.array([5, 6, 5, 7, 6]), {5: 0, 6: 1, 7: 0})
    assert [b.tolist() for b in blocks] == [[0, 2, 3], [1, 4]]


def test_teacher_bench_reports_both_stderrs():
    # six copies of the two hand rollouts (ids 1, 2 -> 1..12), three groups of four
    values = VALUES.assign(rollout_id=VALUES["rollout_id"] - 1).copy()
    frames = [values.assign(rollout_id=values["rollout_id"] + 1 + 2 * c) for c in range(6)]
    many = pd.concat(frames, ignore_index=True)
    lengths = {1 + 2 * c + r: LENGTHS[r + 1] for c in range(6) for r in range(2)}
    outcomes = {1 + 2 * c + r: OUTCOMES[r + 1] for c in range(6) for r in range(2)}
    advantages = {1 + 2 * c + r: ADVANTAGES[r + 1] for c in range(6) for r in range(2)}
    group_of = {rid: (rid - 1) // 4 for rid in lengths}
    seg = teacher_segments(many, lengths, outcomes, group_of)
    metrics, per = score_sums(seg, segment_sums(seg, advantages))
    assert per["ranking_accuracy"].tolist() == [1.0, 0.0] * 6
    assert metrics["ranking_accuracy_se"] > 0
    # each group holds two of each rollout: every draw of groups has mean exactly 0.5
    assert metrics["ranking_accuracy_se_group"] == 0.0
    assert metrics["spearman_se_group"] < 1e-12 < metrics["spearman_se"]
