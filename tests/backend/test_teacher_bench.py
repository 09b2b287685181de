"""teacher-bench metrics on a case small enough to check by hand, and on the shipped demo teacher."""

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

from backend.estimators import registry
from backend.evaluation import first_wrong_step as fws
from backend.evaluation.teacher_bench import parse_estimator_specs, teacher_bench
from backend.evaluation.teacher_segments import (
    chance_row,
    score_advantages,
    score_sums,
    segment_sums,
    teacher_segments,
)
from backend.ingest import import_records
from backend.models.teacher import JOB
from backend.rewards import evaluate
from backend.store import Store, StoreHandle
from tests.conftest import run_cli_here

ROOT = Path(__file__).resolve().parents[2]

# rollout 1: L = 10, failed (R = 0); V̂ 0.5 at 0, 0.75 at 4, 0 at 7 -> segments Δ = +0.25, -0.75, 0,
#   the critical one is segment 1 (after it every continuation fails).
# rollout 2: L = 6, correct (R = 1); V̂ 0.5 at 0, 1.0 at 3 -> segments Δ = +0.5, 0.
VALUES = pd.DataFrame(
    {
        "rollout_id": [1, 1, 1, 2, 2],
        "pos": [0, 4, 7, 0, 3],
        "value": [0.5, 0.75, 0.0, 0.5, 1.0],
        "stderr": [0.1, 0.1, 0.0, 0.2, 0.0],
    }
)
LENGTHS, OUTCOMES = {1: 10, 2: 6}, {1: 0.0, 2: 1.0}
ADVANTAGES = {
    1: np.array([1, 1, 1, 1, -1, -1, -1, 0, 0, 0], dtype=np.float32),  # S = 4, -3, 0
    2: np.array([1, 1, 1, 2, 2, 2], dtype=np.float32),
}  # S = 3, 6


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
        ("token_rm:head=mlp,steps=5", "token_rm", {"head": "mlp", "steps": "5"})
    ]


@pytest.mark.slow
def test_init_imports_the_shipped_teacher_and_the_bench_ranks_on_it(tmp_path, few_bootstrap_draws):
    manifest = json.loads((ROOT / "sample_runs" / "demo_run.json").read_text())["teacher"]
    db = tmp_path / "runs.duckdb"
    done = run_cli_here("init", "--db", db)
    assert done.returncode == 0, done.stderr
    assert "demo teacher" in done.stdout
    with Store(db, read_only=True) as store:
        assert len(store.job_rollouts("demo", JOB)) == manifest["rollouts"]
        values = store.resample_values("demo")
    assert len(values) == manifest["positions"] >= 1000 and (values["n"] >= 16).all()
    again = run_cli_here("init", "--db", db)
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
    # first wrong step (the demo's process channel): flat-per-line credit scores chance, the verifier's own
    # credit scores above it, and the judged rollouts are the failed ones with a wrong step
    assert 150 < result.n_first_wrong < result.n_rollouts
    chance = table.loc["chance", "first_wrong_hit1"]
    assert table.loc["step_boundary", "first_wrong_hit1"] == pytest.approx(chance)
    assert table.loc["process channel", "first_wrong_hit1"] > chance + 0.1
    assert table.loc["process channel", "kind"] == "uses verifier" and best != "process channel"


def test_first_wrong_step_by_hand(tmp_path):
    responses = [
        ("4+8=12 carry 1\n8+4+1=14 carry 1\n#### 142", 0.0),  # failed, first wrong is line 1
        ("4+8=12 carry 1\n8+4+1=13 carry 1\n#### 132", 1.0),  # right: not judged
        ("4+8=13 carry 1\n8+4+1=13 carry 1\n#### 132", 1.0),  # wrong step, right answer: not judged
        ("4+8=12 carry 1\n8+4+1=13 carry 1", 0.0),
    ]  # failed without a wrong step: not judged
    records = []
    for text, task in responses:
        verdict = evaluate(text, 132, list(text), prompt="84+48=?\n", step_verifier="arithmetic_steps")
        records.append(
            {
                "prompt": "84+48=?\n",
                "response": text,
                "tokens": list(text),
                "token_ids": [ord(c) for c in text],
                "rewards": {"task": task, **verdict.scores},
                "token_rewards": {"process": verdict.token_rewards["process"]},
            }
        )
    with Store(tmp_path / "runs.duckdb") as store:
        import_records(store, "steps", records)
        batch = store.load_batch("steps")
    assert batch.rollout_ids.tolist() == [0, 1, 2, 3]
    truth = fws.step_truth(batch)
    assert truth.first_wrong == {0: 1}
    np.testing.assert_array_equal(truth.bounds[0], [0, 15, 32, 40])  # lines [0, 15), [15, 32), [32, 40)
    line = np.repeat([0, 1, 2], [15, 17, 8])

    def hit(per_line):
        return fws.step_hits(truth, {0: np.asarray(per_line, np.float32)[line] / np.bincount(line)[line]})[0]

    assert hit([0, -1, -0.5]) == 1.0  # the most negative line is the first wrong one
    assert hit([0, -0.5, -1]) == 0.0  # the answer line instead
    assert hit([-1, -1, 0]) == 0.5 and hit([1, 1, 1]) == pytest.approx(1 / 3)  # ties share the hit
    assert fws.chance_hits(truth, [0, 1, 2, 3]) == {0: pytest.approx(1 / 3)}
    # the metric in a bench row: a hit on rollout 0, nothing to judge elsewhere
    seg = teacher_segments(VALUES, LENGTHS, OUTCOMES)
    metrics, per = score_advantages(seg, truth, {**ADVANTAGES, 0: -(line == 1).astype(np.float32)})
    assert metrics["first_wrong_hit1"] == 1.0 and per["first_wrong_hit1"].isna().all()  # 0 has no segments
    assert math.isnan(chance_row(seg, fws.StepTruth({}, {}))["first_wrong_hit1"])  # nothing judged
