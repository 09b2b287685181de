"""The calibration table (teacher-bench): per step, mean V̂(∅) of the teacher against the step's observed
accuracy. On the bundled demo, whose shipped teacher sampled every suffix from the final checkpoint, the
early steps show the off-policy gap (and are marked off-policy) and the last step (sampled by that
checkpoint) agrees; by hand from the
shipped files, and through `creditlens teacher-bench --json`."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from backend.calibration import calibration
from backend.store import Store
from tests.conftest import run_cli_here

SAMPLES = Path(__file__).resolve().parents[2] / "sample_runs"


def by_hand() -> pd.DataFrame:
    records = pd.read_json(SAMPLES / "demo_run.jsonl", lines=True)
    records["rollout_id"] = range(len(records))
    records["task"] = [r["task"] for r in records["rewards"]]
    teacher = pq.read_table(SAMPLES / "demo_teacher.parquet").to_pandas()
    v0 = teacher[teacher["pos"] == 0].groupby("rollout_id")["reward"].mean().rename("v0")
    valued = records.join(v0, on="rollout_id", how="inner")
    return valued.groupby("step").agg(v_empty=("v0", "mean"), accuracy=("task", "mean"), n=("v0", "size"))


def test_calibration_equals_the_shipped_files_and_shows_the_off_policy_gap(bundled_db):
    with Store(bundled_db, read_only=True) as store:
        keys = store.rollout_index("demo")
        outcomes = dict(zip(keys["rollout_id"].astype(int), keys["task"].astype(float), strict=True))
        table = calibration(store, "demo", outcomes).set_index("step")
    expected = by_hand()
    assert list(table.index) == [0, 1, 2, 3]
    np.testing.assert_allclose(table["v_empty"], expected["v_empty"], atol=1e-12)
    np.testing.assert_allclose(table["accuracy"], expected["accuracy"], atol=1e-12)
    assert table["n"].tolist() == expected["n"].tolist()
    assert table["step_n"].tolist() == [112] * 4
    gap = table["v_empty"] - table["accuracy"]
    se = np.hypot(table["v_empty_se"], table["accuracy_se"])
    assert gap[0] > 0.7 and gap[0] > 10 * se[0]  # step 0 valued with the final policy: far off
    assert abs(gap[3]) < 2 * se[3]  # step 3 was sampled by that policy: agrees within the stderrs
    # the manifest records that the shipped teacher's model sampled step 3 only (backend.demo.verify_steps)
    assert table["on_policy"].tolist() == [0.0, 0.0, 0.0, 1.0]


def test_teacher_bench_json_and_text_carry_the_calibration(bundled_db, tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli_here(
        "teacher-bench", "--db", bundled_db, "--run", "demo", "--estimators", "grpo", "--json", out
    )
    assert done.returncode == 0, done.stderr
    rows = json.loads(out.read_text())["calibration"]
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert {"step", "v_empty", "accuracy", "n", "v_empty_se", "accuracy_se"} <= set(rows[0])
    expected = by_hand()
    assert [round(r["v_empty"], 3) for r in rows] == expected["v_empty"].round(3).tolist()
    lines = done.stdout.splitlines()
    assert lines[1].startswith("off-policy teacher: 225 of 300 valued rollouts were valued by another model")
    at = next(i for i, line in enumerate(lines) if line.startswith("calibration:"))
    assert lines[at + 2].split()[:6] == ["0", "0.867", "±", "0.014", "0.067", "±"]
    assert lines[at + 2].split()[-1] == "0%" and lines[at + 5].split()[-1] == "100%"  # on-policy share


def test_teacher_bench_on_the_on_policy_step_only(bundled_db, tmp_path):
    out = tmp_path / "bench.json"
    done = run_cli_here(
        "teacher-bench",
        "--db",
        bundled_db,
        "--run",
        "demo",
        "--estimators",
        "grpo",
        "--steps",
        "3",
        "--json",
        out,
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["steps"] == [3] and result["n_rollouts"] == 75  # step 3's valued rollouts, nothing else
    assert [r["step"] for r in result["calibration"]] == [3]
    assert result["calibration"][0]["policy"] == "on-policy"
    assert "off-policy" not in done.stdout and done.stdout.startswith("run 'demo' at steps 3: ")
    grpo = next(r for r in result["rows"] if r["estimator"] == "grpo")
    assert grpo["ranking_accuracy_se_group"] > 0 and grpo["ranking_accuracy_se"] > 0
    missing = run_cli_here("teacher-bench", "--db", bundled_db, "--run", "demo", "--steps", "7")
    assert missing.returncode != 0 and "at steps [7]" in missing.stderr
