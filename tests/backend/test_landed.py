"""Did the credit land: the realized Δ log π per token after each update, by its two routes, and the numbers
every view, the command and the Python API read from `backend.credit.landed`.

The bundled run kl-0.0 was recorded by the TRL recorder with `logprobs_after` (scripts/record_sample_runs.py)
and ships the weights after each of its steps: the recorder's values (route 1) and a scoring of the step's
rollouts with those checkpoints (route 2, `creditlens landed --source checkpoints`) must be the same
numbers."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import spearmanr

import creditlens
from backend.credit import landed
from backend.ingest import import_records
from backend.models import landed_scoring
from backend.store import Store, store_handle
from backend.store.landed_queries import after_checkpoints, cached_after
from tests.conftest import make_records, run_cli_here, write_jsonl

RUN = "kl-0.0"


def test_both_routes_give_the_same_realized_change_on_the_bundled_run(bundled_db):
    handle = store_handle(bundled_db)
    with handle.read() as store:
        folders = after_checkpoints(store, RUN)
    assert sorted(folders) == [1, 2, 3, 4, 5, 6] and all(
        f.endswith(f"checkpoint-{s}") for s, f in folders.items()
    )
    recorded = landed.landed_tokens(handle, RUN, source="recorded")
    with pytest.raises(Exception, match="no realized Δ log π yet"):  # nothing scored yet by route 2
        landed.landed_tokens(handle, RUN, source="checkpoints")
    done = landed_scoring.score_after(handle, RUN)
    assert sum(done.scored.values()) == 48 and done.cached == 0
    again = landed_scoring.score_after(handle, RUN)  # cached in the store: nothing scored twice
    assert again.scored == {} and again.cached == 48
    scored = landed.landed_tokens(handle, RUN, source="checkpoints")
    assert (recorded.source, scored.source) == ("recorded", "checkpoints")
    assert len(recorded.tokens) == len(scored.tokens) == 1415
    np.testing.assert_allclose(scored.tokens["logprob_after"], recorded.tokens["logprob_after"], atol=1e-5)
    # the update moved the policy: a Δ that is all zeros would agree trivially
    assert recorded.tokens["delta"].abs().max() > 1.0
    pd.testing.assert_frame_equal(landed.by_step(recorded), landed.by_step(scored), atol=1e-4)
    with handle.read() as store:
        assert {folder for folder, _ in cached_after(store, RUN).values()} == set(folders.values())


def test_agreement_is_spearman_and_the_share_of_signs_that_match():
    credit = np.array([1.0, -1.0, 0.0, 2.0, 0.5])
    delta = np.array([0.5, -0.2, 0.3, -0.1, 0.05])
    rho, sign = landed.agreement(credit, delta)
    assert rho == pytest.approx(spearmanr(credit, delta).statistic)
    assert sign == pytest.approx(3 / 4)  # the 0-credit token has no sign to agree with
    rho, sign = landed.agreement(np.full(4, 0.7), np.array([0.1, -0.2, 0.3, 0.0]))
    assert math.isnan(rho) and sign == pytest.approx(2 / 4)  # GRPO's constant credit: no ranking


def test_per_step_and_per_class_tables_on_the_bundled_run(bundled_db):
    handle = store_handle(bundled_db)
    tokens = landed.landed_tokens(handle, RUN)
    assert tokens.estimator == "as_trained"  # the trainer's own credit by default
    steps = landed.by_step(tokens)
    assert steps["step"].tolist() == [1, 2, 3, 4, 5, 6]
    assert steps["tokens"].sum() == 1415
    # steps 2 and 5 had only zero-variance groups: no credit, so nothing to agree with
    assert steps.loc[steps["step"].isin([2, 5]), "spearman"].isna().all()
    step1 = tokens.trained[tokens.trained["step"] == 1]
    rho, sign = landed.agreement(step1["credit"].to_numpy(), step1["delta"].to_numpy())
    assert steps.loc[0, "spearman"] == pytest.approx(rho) and steps.loc[0, "sign_agreement"] == pytest.approx(
        sign
    )
    classes = landed.by_class(tokens)
    assert classes["credit_share"].sum() == pytest.approx(1.0)
    assert classes["tokens"].sum() == 1415
    filler = tokens.trained[tokens.trained["token_class"] == "filler"]
    assert classes.set_index("token_class").loc["filler", "mean_delta"] == pytest.approx(
        filler["delta"].mean()
    )
    rollouts = landed.by_rollout(tokens)
    assert len(rollouts) == 48 and rollouts["landed_spearman"].isna().all()  # as trained: one A per rollout
    delta = landed.rollout_delta(handle, RUN, 2)
    np.testing.assert_allclose(delta, tokens.tokens[tokens.tokens["rollout_id"] == 2]["delta"].to_numpy())


def test_the_command_and_the_python_api_give_the_same_numbers(bundled_db):
    done = run_cli_here(
        "landed", "--db", bundled_db, "--run", RUN, "--json", "--rollouts", "--compare", "grpo"
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert (out["estimator"], out["source"]) == ("as_trained", "recorded")
    run = creditlens.open(bundled_db).run(RUN)
    steps = run.landed()
    assert [s["step"] for s in out["steps"]] == steps["step"].tolist()
    for row, (_, api) in zip(out["steps"], steps.iterrows(), strict=True):
        assert (row["spearman"] is None) == math.isnan(api["spearman"])
        if row["spearman"] is not None:
            assert row["spearman"] == pytest.approx(api["spearman"])
    classes = run.landed("classes")
    assert [c["mean_delta"] for c in out["classes"]] == pytest.approx(classes["mean_delta"].tolist())
    assert len(out["rollouts"]) == 48
    assert out["estimators"][0]["estimator"] == "grpo"
    assert out["estimators"][0]["spearman"] == pytest.approx(
        run.landed("estimators", compare=["grpo"])["spearman"][0]
    )
    text = run_cli_here("landed", "--db", bundled_db, "--run", RUN, "--steps", "1,3")
    assert text.returncode == 0 and "recorded route" in text.stdout


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--run", "demo"), "run 'demo' names no after-update checkpoint for any step"),
        (("--run", "demo", "--source", "recorded"), "run 'demo' has no recorded logprobs_after"),
        (("--run", "nope"), "no run named 'nope'"),
        (("--run", RUN, "--steps", "1,x"), "--steps takes comma-separated whole numbers, got '1,x'"),
        (("--run", RUN, "--steps", "9"), "run 'kl-0.0' has no realized Δ at steps 9"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(bundled_db, args, says):
    done = run_cli_here("landed", "--db", bundled_db, *args)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_native_logprobs_after_is_imported_and_checked(tmp_path, suffix):
    records = make_records(n_groups=1, group_size=2)
    for rec in records:
        rec["logprobs_after"] = [x + 0.25 for x in rec["logprobs"]]
    path = tmp_path / f"run{suffix}"
    if suffix == ".jsonl":
        write_jsonl(path, records)
    else:
        frame = pd.DataFrame(records)
        frame["meta"] = [json.dumps({}) for _ in records]
        frame.to_parquet(path)
    done = run_cli_here("import", path, "--db", tmp_path / "a.duckdb", "--run", "r", "--quiet")
    assert done.returncode == 0, done.stderr
    tokens = landed.landed_tokens(store_handle(tmp_path / "a.duckdb"), "r", "grpo")
    assert len(tokens.tokens) == sum(len(r["token_ids"]) for r in records)
    np.testing.assert_allclose(tokens.tokens["delta"], 0.25, atol=1e-6)
    records[1]["logprobs_after"] = records[1]["logprobs_after"][:-1]
    bad = tmp_path / f"bad{suffix}"
    if suffix == ".jsonl":
        write_jsonl(bad, records)
    else:
        frame = pd.DataFrame(records)
        frame["meta"] = [json.dumps({}) for _ in records]
        frame.to_parquet(bad)
    done = run_cli_here("import", bad, "--db", tmp_path / "b.duckdb", "--run", "r", "--quiet")
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1
    assert "record 2" in done.stderr or "line 2" in done.stderr, done.stderr
    assert "'logprobs_after'" in done.stderr, done.stderr


def test_a_run_without_realized_change_has_none_and_no_row(tmp_path):
    with Store(tmp_path / "c.duckdb") as store:
        import_records(store, "plain", make_records(n_groups=1, group_size=2), content_key="plain")
    handle = store_handle(tmp_path / "c.duckdb")
    assert landed.rollout_delta(handle, "plain", 0) is None
    with pytest.raises(Exception, match="no realized Δ log π yet"):
        landed.landed_tokens(handle, "plain")


def test_tokens_the_trust_region_dropped_are_counted_and_left_out(tmp_path):
    """prime-rl's `is_masked` (kept by its importer as the token feature of that name): a masked token's
    credit never reached the gradient, so it is counted per step and left out of the agreement."""
    records = make_records(n_groups=1, group_size=4)
    for k, rec in enumerate(records):
        n = len(rec["token_ids"])
        rec["logprobs_after"] = [x + (0.1 if k % 2 else -0.1) for x in rec["logprobs"]]
        rec["extras"] = {"is_masked": [1.0 if i < 2 else 0.0 for i in range(n)]}
    path = write_jsonl(tmp_path / "masked.jsonl", records)
    assert (
        run_cli_here("import", path, "--db", tmp_path / "m.duckdb", "--run", "m", "--quiet").returncode == 0
    )
    tokens = landed.landed_tokens(store_handle(tmp_path / "m.duckdb"), "m", "grpo")
    assert tokens.tokens["dropped"].sum() == 2 * len(records)
    steps = landed.by_step(tokens)
    assert steps["dropped"].tolist() == [2 * len(records)]
    assert steps["tokens"].tolist() == [len(tokens.tokens) - 2 * len(records)]
