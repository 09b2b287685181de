"""The calibration table (teacher-bench): per step, mean V̂(∅) of the teacher against the step's observed
accuracy. On the bundled demo, whose shipped teacher sampled each rollout's suffixes from the checkpoint
that sampled its step, every step is on-policy and agrees within the stderrs; by hand from the shipped
files, and through `creditlens teacher-bench --json`."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from backend.evaluation.calibration import calibration
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


def test_calibration_equals_the_shipped_files_and_every_step_agrees_on_policy(bundled_db):
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
    # every step valued by its own checkpoint: each agrees within one combined stderr (the old demo's
    # teacher, the final checkpoint for every step, missed step 0 by 0.80, 25 stderrs)
    assert (gap.abs() < se).all(), (gap / se).round(2).tolist()
    assert table["v_empty"].is_monotonic_increasing  # the policy gets better step by step, and V̂(∅) says so
    assert table["on_policy"].tolist() == [1.0, 1.0, 1.0, 1.0]  # every shipped suffix row says on_policy


def test_teacher_bench_json_and_text_carry_the_calibration(bundled_db, tmp_path, few_bootstrap_draws):
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
    assert "off-policy" not in done.stdout  # no warning: every value is on-policy
    at = next(i for i, line in enumerate(lines) if line.startswith("calibration:"))
    assert lines[at + 2].split()[:6] == ["0", "0.077", "±", "0.009", "0.080", "±"]
    assert [lines[at + k].split()[-1] for k in range(2, 6)] == ["100%"] * 4  # on-policy share


def test_teacher_bench_on_the_on_policy_step_only(bundled_db, tmp_path, few_bootstrap_draws):
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


def test_values_from_another_model_are_warned_and_marked(bundled_db, few_bootstrap_draws):
    """Step 0's teacher suffixes marked as sampled by another model (what `creditlens teacher --model DIR`
    stores for a step that DIR did not sample): the bench warns and the table says which steps."""
    with Store(bundled_db) as store:
        run_id = store.run_id("demo")
        store.con.execute(
            "UPDATE resample_samples SET on_policy = false WHERE run_id = ? AND rollout_id IN "
            "(SELECT rollout_id FROM rollouts WHERE run_id = ? AND step = 0)",
            [run_id, run_id],
        )
    done = run_cli_here("teacher-bench", "--db", bundled_db, "--run", "demo", "--estimators", "grpo")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[1].startswith(
        "off-policy teacher: 75 of 300 valued rollouts were valued by another model than the checkpoint "
        "that sampled them (steps 0)"
    )
    at = next(i for i, line in enumerate(lines) if line.startswith("calibration:"))
    assert [lines[at + k].split()[-1] for k in range(2, 6)] == ["0%", "100%", "100%", "100%"]
