"""teacher-bench metrics on a case small enough to check by hand, and on the shipped demo teacher."""

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from backend.estimators import registry
from backend.models.teacher import JOB
from backend.store import Store, StoreHandle
from backend.teacher_bench import (
    chance_row,
    parse_estimator_specs,
    score_sums,
    segment_sums,
    teacher_bench,
    teacher_segments,
)

ROOT = Path(__file__).resolve().parents[2]

# rollout 1: L = 10, failed (R = 0); V̂ 0.5 at 0, 0.75 at 4, 0 at 7 -> segments Δ = +0.25, -0.75, 0,
#   the critical one is segment 1 (after it every continuation fails).
# rollout 2: L = 6, correct (R = 1); V̂ 0.5 at 0, 1.0 at 3 -> segments Δ = +0.5, 0.
VALUES = pd.DataFrame({"rollout_id": [1, 1, 1, 2, 2], "pos": [0, 4, 7, 0, 3],
                       "value": [0.5, 0.75, 0.0, 0.5, 1.0], "stderr": [0.1, 0.1, 0.0, 0.2, 0.0]})
LENGTHS, OUTCOMES = {1: 10, 2: 6}, {1: 0.0, 2: 1.0}
ADVANTAGES = {1: np.array([1, 1, 1, 1, -1, -1, -1, 0, 0, 0], dtype=np.float32),  # S = 4, -3, 0
              2: np.array([1, 1, 1, 2, 2, 2], dtype=np.float32)}  # S = 3, 6


def test_metrics_by_hand():
    seg = teacher_segments(VALUES, LENGTHS, OUTCOMES)
    np.testing.assert_allclose(seg.delta, [0.25, -0.75, 0.0, 0.5, 0.0])
    np.testing.assert_allclose(seg.delta_se, [math.hypot(0.1, 0.1), 0.1, 0.0, 0.2, 0.0])
    assert seg.critical == {1: 1, 2: None} and seg.n_positions == 5
    sums = segment_sums(seg, ADVANTAGES)
    np.testing.assert_allclose(sums, [4, -3, 0, 3, 6])
    metrics, per = score_sums(seg, sums)
    # ranking: rollout 1 orders its 3 pairs as the teacher does (1.0); rollout 2 gets its one pair wrong (0.0)
    assert per["ranking_accuracy"].tolist() == [1.0, 0.0]
    assert metrics["ranking_accuracy"] == 0.5 and metrics["ranking_accuracy_se"] == pytest.approx(0.5)
    # sign: clearly non-zero are segment 1 of rollout 1 (0.75 > 2 * 0.1) and segment 0 of rollout 2
    # (0.5 > 2 * 0.2); segment 0 of rollout 1 is not (0.25 < 2 * 0.141); both signs right
    assert per["sign_accuracy"].tolist() == [1.0, 1.0] and metrics["sign_accuracy_se"] == 0.0
    # critical: segment 1 is rollout 1's most negative; rollout 2 succeeded and is not judged
    assert per["critical_hit1"].tolist()[0] == 1.0 and math.isnan(per["critical_hit1"].tolist()[1])
    assert metrics["critical_hit1"] == 1.0 and metrics["critical_hit3"] == 1.0
    expected = spearmanr([4, -3, 0, 3, 6], [0.25, -0.75, 0.0, 0.5, 0.0]).statistic
    assert metrics["spearman"] == pytest.approx(expected)
    chance = chance_row(seg)
    assert chance["critical_hit1"] == pytest.approx(1 / 3) and chance["critical_hit3"] == 1.0


def test_inverted_and_tied_predictions():
    seg = teacher_segments(VALUES, LENGTHS, OUTCOMES)
    inverted, _ = score_sums(seg, -segment_sums(seg, ADVANTAGES))
    assert inverted["ranking_accuracy"] == 0.5  # 0 and 1 per rollout: exactly mirrored
    assert inverted["sign_accuracy"] == 0.0 and inverted["critical_hit1"] == 0.0
    flat = {1: np.zeros(10, np.float32), 2: np.zeros(6, np.float32)}
    tied, per = score_sums(seg, segment_sums(seg, flat))
    assert per["ranking_accuracy"].tolist() == [0.5, 0.5] and tied["sign_accuracy"] == 0.5
    assert math.isnan(tied["spearman"])  # a constant prediction has no rank correlation


def test_estimator_list_comes_from_the_registry():
    assert [name for _, name, _ in parse_estimator_specs(None)] == registry.names()
    assert parse_estimator_specs(["token_rm:head=mlp,steps=5"]) == [
        ("token_rm:head=mlp,steps=5", "token_rm", {"head": "mlp", "steps": "5"})]


@pytest.mark.slow
def test_init_imports_the_shipped_teacher_and_the_bench_ranks_on_it(tmp_path):
    manifest = json.loads((ROOT / "sample_runs" / "demo_run.json").read_text())["teacher"]
    db = tmp_path / "runs.duckdb"
    done = subprocess.run([sys.executable, "-m", "backend.cli", "init", "--db", str(db)], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "demo teacher" in done.stdout
    with Store(db, read_only=True) as store:
        assert len(store.job_rollouts("demo", JOB)) == manifest["rollouts"]
        values = store.resample_values("demo")
    assert len(values) == manifest["positions"] >= 1000 and (values["n"] >= 16).all()
    again = subprocess.run([sys.executable, "-m", "backend.cli", "init", "--db", str(db)], cwd=ROOT,
                           capture_output=True, text=True, timeout=300)
    assert "none (already there)" in again.stdout  # the teacher is not imported twice

    result = teacher_bench(StoreHandle(db), "demo")
    table = result.table.set_index("estimator")
    ranked = table[table["kind"] == "estimator"]
    assert len(ranked) >= 15 and ranked["ranking_accuracy_se"].notna().all()
    best = ranked["ranking_accuracy"].idxmax()
    assert table.loc[f"{best} (inverted)", "ranking_accuracy"] < 0.5 < ranked.loc[best, "ranking_accuracy"]
    assert table.loc[f"{best} (inverted)", "spearman"] < 0
    shuffled = table.loc[f"{best} (shuffled)"]
    assert abs(shuffled["ranking_accuracy"] - 0.5) < 3 * shuffled["ranking_accuracy_se"]
    assert not result.misses(best, "ranking_accuracy").empty
