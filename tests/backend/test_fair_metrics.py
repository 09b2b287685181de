"""Fair teacher-bench metrics: a per-token-mean ranking that segment length cannot win,
Wilson stderrs where every suffix agrees, and a shuffled sanity row that keeps the segment layout; by hand
and on the bundled demo's shipped teacher."""

import math

import numpy as np

from backend.credit import estimates
from backend.estimators import registry
from backend.evaluation import fair_metrics as fair
from backend.evaluation.teacher_bench import teacher_bench
from backend.evaluation.teacher_segments import Segments, per_rollout_metrics, segment_sums, teacher_segments
from backend.store import StoreHandle


def one_rollout(delta, lengths, se=None) -> Segments:
    ends = np.cumsum(lengths)
    n = len(delta)
    return Segments(
        rollout=np.zeros(n, int),
        start=ends - np.asarray(lengths),
        end=ends,
        delta=np.asarray(delta, float),
        delta_se=np.asarray(se if se is not None else [0.0] * n),
        index=np.arange(n),
        critical={0: None},
        n_positions=n,
        delta_se_wilson=np.full(n, 0.2),
    )


def test_broadcast_credit_wins_by_length_on_sums_and_is_at_chance_on_means():
    # Δ rises with segment length; one advantage on every token: sums follow length, means are all equal
    segments = one_rollout([0.1, 0.2, 0.3, 0.4], [2, 5, 9, 14])
    sums = segment_sums(segments, {0: np.full(30, 0.5)})
    row = per_rollout_metrics(segments, sums).iloc[0]
    assert row["ranking_accuracy"] == 1.0
    assert row["ranking_accuracy_per_token"] == 0.5
    # a predictor that follows Δ per token wins on both
    tokens = np.concatenate([np.full(n, d) for d, n in zip([0.1, 0.2, 0.3, 0.4], [2, 5, 9, 14], strict=True)])
    row = per_rollout_metrics(segments, segment_sums(segments, {0: tokens})).iloc[0]
    assert row["ranking_accuracy_per_token"] == 1.0


def test_wilson_stderr_where_all_suffixes_agree():
    se = fair.wilson_se(np.array([1.0, 0.0, 0.5]), np.array([16, 16, 16]), np.array([0.0, 0.0, 0.129]))
    assert math.isclose(se[0], math.sqrt(0.9 * 0.1 / 20)) and math.isclose(se[1], se[0])  # 0.067, not 0
    assert math.isclose(se[2], 0.129)  # never below the sample stderr
    # a Δ of 0.1 between two unanimous positions is "clear" with stderr 0, not with the Wilson stderr
    segments = one_rollout([0.1], [3], se=[0.0])
    segments.delta_se_wilson = np.array([math.hypot(se[0], se[0])])
    row = per_rollout_metrics(segments, np.array([-1.0])).iloc[0]
    assert row["sign_accuracy"] == 0.0 and math.isnan(row["sign_accuracy_wilson"])


def test_segment_shuffle_keeps_the_layout_and_is_at_chance_on_rankings():
    lengths = [2, 5, 9, 14, 3]
    segments = one_rollout([0.5, -0.2, 0.1, 0.3, -0.4], lengths)
    advantages = {0: np.linspace(-1, 1, sum(lengths))}
    sums = segment_sums(segments, advantages)
    ranks = []
    for seed in range(400):
        shuffled = fair.segment_shuffle(
            segments.rollout, segments.start, segments.end, sums, advantages, seed
        )
        moved = segment_sums(segments, shuffled)
        assert sorted(np.round(moved, 9)) == sorted(np.round(sums, 9))  # the same sums, other segments
        for a, b in zip(segments.start, segments.end, strict=True):
            assert np.ptp(shuffled[0][a:b]) < 1e-12  # each segment's tokens share its sum
        ranks.append(fair.pair_ranking(segments.delta, moved))
    assert abs(np.mean(ranks) - 0.5) < 0.03


def test_on_the_demo_teacher_grpo_loses_its_length_edge_and_the_shuffled_row_ranks_at_chance(bundled_db):
    bench = teacher_bench(StoreHandle(bundled_db), "demo", [("grpo", "grpo", {})])
    table = bench.table.set_index("estimator")
    grpo = table.loc["grpo"]
    assert grpo["ranking_accuracy"] > 0.52  # its edge on segment sums: longer segments
    assert grpo["ranking_accuracy_per_token"] == 0.5 and grpo["ranking_accuracy_per_token_se"] == 0.0
    shuffled = table.loc["grpo (shuffled)"]  # one permutation per rollout: chance within its sampling noise
    for metric in ("ranking_accuracy", "ranking_accuracy_per_token"):
        assert abs(shuffled[metric] - 0.5) < 3 * shuffled[f"{metric}_se"]
    # over permutations it is at chance by construction (token permutation kept grpo's length edge)
    segments = bench_segments(bundled_db)
    advantages = grpo_advantages(bundled_db, segments)
    sums = segment_sums(segments, advantages)
    draws = [
        per_rollout_metrics(
            segments,
            segment_sums(
                segments,
                fair.segment_shuffle(segments.rollout, segments.start, segments.end, sums, advantages, seed),
            ),
        )["ranking_accuracy"].mean()
        for seed in range(12)
    ]
    assert abs(np.mean(draws) - 0.5) < 0.015


def bench_segments(db) -> Segments:
    with StoreHandle(db).read() as store:
        values = store.resample_values("demo")
        batch = store.load_batch("demo")
    ids = batch.rollout_ids.tolist()
    return teacher_segments(
        values,
        dict(zip(ids, batch.lengths.tolist(), strict=True)),
        dict(zip(ids, batch.scores["task"].double().tolist(), strict=True)),
    )


def grpo_advantages(db, segments: Segments) -> dict[int, np.ndarray]:
    valued = sorted({int(r) for r in segments.rollout})
    return estimates.estimate_rollouts(
        StoreHandle(db), "demo", "grpo", registry.make_config("grpo"), valued
    ).advantages
