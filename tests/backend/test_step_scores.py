"""The process channel in a real store: present after `creditlens init`, and written by
`creditlens verify-steps` on a user's run exactly as the bundled demo run ships it."""

import json
from pathlib import Path

import numpy as np
import pytest

from backend.store import Store
from tests.conftest import run_cli_here, snapshot, write_jsonl

DEMO = Path(__file__).resolve().parents[2] / "sample_runs" / "demo_run.jsonl"


@pytest.fixture(scope="module")
def fresh_db(tmp_path_factory) -> Path:
    db = tmp_path_factory.mktemp("init") / "runs.duckdb"
    assert run_cli_here("init", "--db", str(db)).returncode == 0
    return db


def process_of(db: Path, run: str) -> tuple[dict[int, float], dict[int, np.ndarray]]:
    with Store(db, read_only=True) as store:
        batch = store.load_batch(run)
    ids = batch.rollout_ids.tolist()
    scores = dict(zip(ids, batch.scores["process"].tolist(), strict=True))
    local = {r: batch.token_rewards["process"][i, : batch.lengths[i]].numpy() for i, r in enumerate(ids)}
    return scores, local


def test_init_imports_the_demo_run_with_its_process_channel(fresh_db):
    done = run_cli_here("runs", "--db", str(fresh_db), "--json")
    assert done.returncode == 0
    runs = {r["name"]: r for r in json.loads(done.stdout)}
    assert "process" in runs["demo"]["channels"]
    records = [json.loads(line) for line in DEMO.read_text().splitlines()]
    scores, local = process_of(fresh_db, "demo")
    assert [scores[i] for i in range(len(records))] == [r["rewards"]["process"] for r in records]
    for i, rec in enumerate(records):
        np.testing.assert_array_equal(local[i], rec["token_rewards"]["process"])


def test_verify_steps_writes_the_process_channel_of_a_users_run(fresh_db, tmp_path):
    # the last 64 rollouts (step 3: eight whole groups, some with a wrong step and some without); the
    # demo's rollout id is this run's plus `offset`
    demo_records = [json.loads(line) for line in DEMO.read_text().splitlines()]
    records, offset = demo_records[-64:], len(demo_records) - 64
    for rec in records:  # a user's run: the same rollouts, no process channel yet
        del rec["rewards"]["process"], rec["token_rewards"]["process"]
    path = write_jsonl(tmp_path / "mine.jsonl", records)
    db = tmp_path / "runs.duckdb"
    assert run_cli_here("import", str(path), "--db", str(db), "--run", "mine", "--quiet").returncode == 0
    out = tmp_path / "a.parquet"
    assert (
        run_cli_here(
            "estimate",
            "--db",
            str(db),
            "--run",
            "mine",
            "--estimator",
            "grpo",
            "--channel",
            "all",
            "--out",
            str(out),
        ).returncode
        == 0
    )
    with Store(db, read_only=True) as store:
        before = store.con.execute("SELECT sum(reward) FROM rollout_summary").fetchone()[0]
        assert store.con.execute("SELECT count(*) FROM estimates").fetchone()[0] > 0

    done = run_cli_here("verify-steps", "--db", str(db), "--run", "mine", "--json")
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert report["rollouts"] == 64 and 0 < report["with_wrong_step"] == len(report["first_wrong"]) < 64
    assert report["first_wrong"][0] == {"rollout_id": 2, "step": 2, "note": "answer 42, expected 72"}
    mine, demo = process_of(db, "mine"), process_of(fresh_db, "demo")
    assert all(mine[0][r] == demo[0][r + offset] for r in range(64))
    assert all(np.array_equal(mine[1][r], demo[1][r + offset]) for r in range(64))
    with Store(db, read_only=True) as store:
        # the summed reward now includes process, and "all channels" estimates were dropped
        after = store.con.execute("SELECT sum(reward) FROM rollout_summary").fetchone()[0]
        assert after == pytest.approx(before + sum(mine[0].values()))
        assert store.con.execute("SELECT count(*) FROM estimates").fetchone()[0] == 0
    # again: replaced, not doubled
    assert run_cli_here("verify-steps", "--db", str(db), "--run", "mine").returncode == 0
    with Store(db, read_only=True) as store:
        assert store.con.execute("SELECT count(*) FROM scores WHERE channel = 'process'").fetchone()[0] == 64


def test_a_bad_step_verifier_is_one_line_and_writes_nothing(fresh_db):
    with Store(fresh_db, read_only=True) as store:
        before = snapshot(store)
    done = run_cli_here("verify-steps", "--db", str(fresh_db), "--run", "demo", "--step-verifier", "nope")
    assert done.returncode == 2
    err = done.stderr.strip()
    assert err.startswith("creditlens verify-steps: error: unknown step verifier 'nope'") and "\n" not in err
    done = run_cli_here(
        "verify-steps",
        "--db",
        str(fresh_db),
        "--run",
        "demo",
        "--step-verifier",
        "tests.backend.rewards.test_steps:user_bad",
    )
    assert done.returncode == 2 and "run 'demo', rollout 0: step verifier" in done.stderr
    with Store(fresh_db, read_only=True) as store:
        assert snapshot(store) == before
