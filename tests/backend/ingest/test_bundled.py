"""The bundled demo is on-policy: its manifest names the checkpoint that sampled each step, the bundled import
attaches them, every step's rollouts resolve to their own checkpoint (teacher, resample, score, model-credit
and the Resample view use it), the shipped checkpoints give the stored logprobs back, and every value of
the shipped Monte Carlo teacher was sampled on-policy. Real shipped files and a real store."""

import json
from pathlib import Path

import pyarrow.parquet as pq

from backend.demo.bundled import SAMPLE_DIR, bundled_manifests
from backend.demo.verify_steps import records_by_step, rescore_gap
from backend.evaluation.calibration import calibration
from backend.store import Store
from backend.store.checkpoint_queries import empty_prefix_values
from backend.store.checkpoints import choices_for, rollout_model
from tests.conftest import run_cli_here

STEP_FOLDERS = {
    0: SAMPLE_DIR / "demo-policy-steps" / "step0",
    1: SAMPLE_DIR / "demo-policy-steps" / "step1",
    2: SAMPLE_DIR / "demo-policy-steps" / "step2",
    3: SAMPLE_DIR / "demo-policy",  # step 3's checkpoint is the final model, shipped once
}


def demo_manifest() -> dict:
    return next(spec for spec in bundled_manifests() if spec["run"] == "demo")


def test_the_manifest_names_a_shipped_checkpoint_for_every_step():
    spec = demo_manifest()
    assert spec["checkpoints"] == {step: str(folder) for step, folder in STEP_FOLDERS.items()}
    for folder in STEP_FOLDERS.values():
        assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    # the records say which checkpoint sampled them; the manifest's folders agree
    for step, records in records_by_step().items():
        assert {r["meta"]["checkpoint"] for r in records} == {f"step{step}"}
        assert step == 3 or STEP_FOLDERS[step].name == f"step{step}"


def test_every_steps_rollouts_resolve_to_their_own_checkpoint(bundled_db):
    listed = json.loads(run_cli_here("checkpoints", "--db", bundled_db, "--run", "demo", "--json").stdout)
    assert [(s["step"], s["checkpoint"], s["exists"], s["rollouts"]) for s in listed["steps"]] == [
        (step, str(folder), True, 112) for step, folder in STEP_FOLDERS.items()
    ]
    with Store(bundled_db, read_only=True) as store:
        choices = choices_for(store, "demo", STEP_FOLDERS, None)
        keys = store.rollout_keys("demo")
        one_per_step = keys.groupby("step")["rollout_id"].first()
        per_rollout = {int(s): rollout_model(store, "demo", int(r)) for s, r in one_per_step.items()}
        oracle = json.loads(
            run_cli_here("checkpoints", "--db", bundled_db, "--run", "oracle", "--json").stdout
        )
    for step, folder in STEP_FOLDERS.items():
        assert (choices[step].model_dir, choices[step].on_policy) == (str(folder), True)
        assert (per_rollout[step].model_dir, per_rollout[step].on_policy) == (str(folder), True)
    assert [s["checkpoint"] for s in oracle["steps"]] == [
        None
    ]  # a manifest without checkpoints attaches none


def test_the_shipped_checkpoints_give_the_stored_logprobs_back():
    """The evidence that the demo is on-policy (`python -m backend.demo.verify_steps` on every token): each
    step's responses rescored with its own checkpoint give the stored logprobs (4 decimals) back, and with
    another step's checkpoint they do not."""
    by_step = records_by_step()
    for step, folder in STEP_FOLDERS.items():
        records = by_step[step][:8]
        assert rescore_gap(folder, records)["max_abs_diff"] <= 6e-5, step
    assert rescore_gap(STEP_FOLDERS[3], by_step[0][:8])["max_abs_diff"] > 0.5  # the final policy is another


def test_every_value_of_the_shipped_teacher_is_on_policy(bundled_db):
    shipped = pq.read_table(SAMPLE_DIR / demo_manifest()["teacher"]["file"])
    assert "on_policy" in shipped.column_names and all(shipped.column("on_policy").to_pylist())
    # the file names its models relative to sample_runs/ (no folder of the machine that made it); the
    # import resolves them in this checkout, where each is the checkpoint its step records
    assert set(shipped.column("model").to_pylist()) == {
        "demo-policy-steps/step0",
        "demo-policy-steps/step1",
        "demo-policy-steps/step2",
        "demo-policy",
    }
    with Store(bundled_db, read_only=True) as store:
        used = set(store.job_samples("demo", "teacher").column("model").to_pylist())
    assert used == {str(SAMPLE_DIR / m) for m in shipped.column("model").to_pylist()}
    assert all(Path(m).is_dir() for m in used)
    with Store(bundled_db, read_only=True) as store:
        stored = store.con.execute(
            "SELECT count(*), count(*) FILTER (WHERE on_policy) FROM resample_samples WHERE run_id = ?",
            [store.run_id("demo")],
        ).fetchone()
        starts = empty_prefix_values(store, "demo")
        keys = store.rollout_index("demo")
        table = calibration(store, "demo", dict(zip(keys["rollout_id"], keys["task"], strict=True)))
    assert stored == (shipped.num_rows, shipped.num_rows)
    assert starts["on_policy"].tolist() == [True] * 300
    assert table["on_policy"].tolist() == [1.0] * 4
    done = run_cli_here("teacher-bench", "--db", bundled_db, "--run", "demo", "--estimators", "grpo")
    assert done.returncode == 0, done.stderr
    assert "off-policy" not in done.stdout
