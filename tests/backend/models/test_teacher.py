"""The Monte Carlo teacher job on the demo policy and a real DuckDB store: same values in chunks as one
rollout at a time, cancel keeps whole rollouts, a rerun resumes, a failing rollout leaves no partial
rows, the command line, and the Ray path on a local cluster."""

import json
import threading

import numpy as np
import pandas as pd
import pytest

from backend.core.errors import InputError
from backend.ingest import import_path
from backend.models.resample import resample
from backend.models.teacher import (
    JOB,
    TeacherSettings,
    chunk_tasks,
    pick_rollouts,
    plan_teacher,
    read_teacher_file,
    run_teacher,
    teacher_positions,
    value_rollouts,
)
from backend.rewards import get_verifier
from backend.store import Store, StoreHandle
from tests.backend.models.conftest import DEMO_MODEL, DEMO_RUN
from tests.conftest import copy_store, run_cli_here

FAIL_TRUTH = "fail-here"


def failing_verifier(response: str, ground_truth) -> float:
    """answer_match, except that it raises for one marked rollout (a verifier bug in user code)."""
    if ground_truth == FAIL_TRUTH:
        raise RuntimeError("verifier crashed")
    return get_verifier("answer_match")(response, ground_truth)


def settings(samples=3, verifier="answer_match", chunk_rows=256):
    return TeacherSettings(
        model_dir=str(DEMO_MODEL),
        samples=samples,
        verifier=verifier,
        engine="transformers",
        device="cpu",
        max_new_tokens=60,
        chunk_rows=chunk_rows,
    )


def test_positions_and_rollout_picks():
    tokens = list("ab\ncd\n#### 4")
    assert teacher_positions("steps", tokens, None, len(tokens)) == [0, 3, 6]
    assert teacher_positions("every:5", tokens, None, len(tokens)) == [0, 5, 10]
    assert teacher_positions("entropy:2", tokens, [0.0] * 4 + [3.0, 0, 0, 2.0] + [0] * 4, 12) == [0, 4, 7]
    for bad, message in (("entropy:x", "integer K"), ("every:0", ">= 1"), ("random", "choose steps")):
        with pytest.raises(InputError, match=message):
            teacher_positions(bad, tokens, [0.0] * 12, 12)
    with pytest.raises(InputError, match="needs entropies"):
        teacher_positions("entropy:2", tokens, None, 12)
    assert pick_rollouts(range(10), 3) == [0, 4, 9]
    assert pick_rollouts(range(10), None) == list(range(10))


def test_chunks_draw_what_one_rollout_at_a_time_draws(demo_db, engine):
    with Store(demo_db, read_only=True) as store:
        tasks, _ = plan_teacher(store, "demo", rollouts=3, positions="steps", seed=5, verifier="answer_match")
    assert len(chunk_tasks(tasks, samples=3, rows=12)) >= 2  # the grouping itself is exercised
    together = value_rollouts(engine, tasks, settings())
    for task, result in zip(tasks, together, strict=True):
        alone = resample(
            engine,
            list(task.prompt_ids),
            list(task.token_ids),
            list(task.positions),
            samples=3,
            ground_truth=task.ground_truth,
            max_new_tokens=60,
            seed=task.seed,
        )
        assert [(s.pos, s.seed, s.suffix_ids, s.reward) for s in result.samples] == [
            (s.pos, s.seed, s.suffix_ids, s.reward) for s in alone.samples
        ]
        assert not result.cancelled and len(result.samples) == len(task.positions) * 3


def _per_rollout_counts(db) -> pd.DataFrame:
    with Store(db, read_only=True) as store:
        return store.con.execute(
            "SELECT rollout_id, count(*) AS n, count(DISTINCT pos) AS positions FROM resample_samples "
            "WHERE job = ? GROUP BY rollout_id ORDER BY rollout_id",
            [JOB],
        ).df()


def test_cancel_keeps_whole_rollouts_and_a_rerun_resumes(demo_db, demo_template, tmp_path, engine):
    handle = StoreHandle(demo_db)
    stop = threading.Event()
    seen = []

    def progress(done, total):
        seen.append(done)
        if done >= 2:
            stop.set()

    first = run_teacher(
        handle, "demo", settings(), rollouts=6, seed=1, engine=engine, progress=progress, cancel=stop
    )
    assert first.cancelled and first.valued == seen[-1] >= 2 and first.valued < 6
    counts = _per_rollout_counts(demo_db)
    assert len(counts) == first.valued
    assert (counts["n"] == counts["positions"] * 3).all()  # every stored rollout is whole
    again = run_teacher(handle, "demo", settings(), rollouts=6, seed=1, engine=engine)
    assert not again.cancelled and again.already == first.valued and again.valued == 6 - first.valued
    assert run_teacher(handle, "demo", settings(), rollouts=6, seed=1, engine=engine).valued == 0  # all done

    # The interrupted job's values equal those of one uninterrupted job on a second store.
    other = tmp_path / "other.duckdb"
    copy_store(demo_template, other)
    run_teacher(StoreHandle(other), "demo", settings(), rollouts=6, seed=1, engine=engine)
    with Store(demo_db, read_only=True) as a, Store(other, read_only=True) as b:
        pd.testing.assert_frame_equal(a.resample_values("demo"), b.resample_values("demo"))


@pytest.mark.slow
def test_a_failing_rollout_leaves_no_partial_rows(tmp_path, engine):
    records = [json.loads(line) for line in DEMO_RUN.read_text().splitlines()[:24]]
    for record in records[16:]:  # the third group: its ground truth makes the verifier crash
        record["meta"]["ground_truth"] = FAIL_TRUTH
    path = tmp_path / "run.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    db = tmp_path / "runs.duckdb"
    with Store(db) as store:
        import_path(store, path, "r", model_dir=str(DEMO_MODEL))
    verifier = "tests.backend.models.test_teacher:failing_verifier"
    with pytest.raises(RuntimeError, match="verifier crashed"):
        run_teacher(StoreHandle(db), "r", settings(verifier=verifier, chunk_rows=24), engine=engine)
    counts = _per_rollout_counts(db)
    assert 0 < len(counts) and counts["rollout_id"].max() < 16  # rollouts before the crash are kept ...
    assert (counts["n"] == counts["positions"] * 3).all()  # ... whole, and nothing of the failing chunk


def test_teacher_file_errors_name_the_row_and_field(tmp_path):
    good = pd.DataFrame(
        {
            "rollout_id": [0, 1],
            "pos": [0, 3],
            "sample_idx": [0, 0],
            "seed": [1, 2],
            "suffix_ids": [[1], [2]],
            "suffix_text": ["a", "b"],
            "reward": [1.0, 0.0],
            "engine": ["transformers"] * 2,
            "model": ["m"] * 2,
        }
    )
    path = tmp_path / "t.parquet"
    good.to_parquet(path)
    assert read_teacher_file(path, {0: 5, 1: 5}).num_rows == 2
    with pytest.raises(InputError, match=r"row 1: field pos: 3 is outside rollout 1"):
        read_teacher_file(path, {0: 5, 1: 2})
    with pytest.raises(InputError, match=r"row 1: field rollout_id: the run has no rollout 1"):
        read_teacher_file(path, {0: 5})
    good.drop(columns=["reward"]).to_parquet(path)
    with pytest.raises(InputError, match="missing column"):
        read_teacher_file(path, {0: 5, 1: 5})


@pytest.mark.slow
def test_teacher_and_teacher_bench_commands(demo_db, tmp_path):
    out = tmp_path / "teacher.parquet"
    done = run_cli_here(
        "teacher",
        "--db",
        str(demo_db),
        "--run",
        "demo",
        "--rollouts",
        "4",
        "--samples",
        "2",
        "--max-new-tokens",
        "60",
        "--json",
        "--export",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["valued"] == 4 and report["suffixes"] == 2 * report["positions"]
    assert pd.read_parquet(out)["rollout_id"].nunique() == 4
    bench = tmp_path / "bench.json"
    done = run_cli_here(
        "teacher-bench",
        "--db",
        str(demo_db),
        "--run",
        "demo",
        "--estimators",
        "grpo",
        "token_rm:head=mlp,steps=20",
        "--json",
        str(bench),
    )
    assert done.returncode == 0, done.stderr
    rows = {r["estimator"]: r for r in json.loads(bench.read_text())["rows"]}
    assert {"grpo", "token_rm:head=mlp,steps=20", "chance", "V: fitted"} <= set(rows)
    assert rows["grpo"]["n_positions"] == report["positions"]
    bad = run_cli_here("teacher", "--db", str(demo_db), "--run", "demo", "--positions", "every:x")
    assert bad.returncode == 2 and "every:K with an integer K" in bad.stderr
    bad = run_cli_here("teacher-bench", "--db", str(demo_db), "--run", "demo", "--estimators", "nope")
    assert bad.returncode == 2 and "nope" in bad.stderr


@pytest.mark.slow
def test_ray_local_cluster_gives_the_single_process_values(demo_db, demo_template, tmp_path, engine):
    """A real job on a local Ray cluster, kept small: its cost is the cluster's start and the actor's
    engine (the imports of torch and transformers in a fresh worker), not the sampling, so one CPU, one
    actor, 4 rollouts of M = 2. One rollout per chunk, two chunks in flight: every result must still be
    paired with its rollout. (Two actors finishing out of order is `python -m bench teacher`'s to show:
    a second engine here cost 10 s of the suite's 2 cores.)"""
    import ray  # noqa: PLC0415 - heavy, only here; pinned in requirements.txt, so missing fails, never skips

    small = settings(samples=2, chunk_rows=1)
    run_teacher(StoreHandle(demo_db), "demo", small, rollouts=4, seed=3, engine=engine)
    other = tmp_path / "ray.duckdb"
    copy_store(demo_template, other)
    try:
        report = run_teacher(StoreHandle(other), "demo", small, rollouts=4, seed=3, ray_address="local:1")
    finally:
        ray.shutdown()
    assert report.workers == 1 and report.valued == 4 and "ray" in report.engine
    with Store(demo_db, read_only=True) as a, Store(other, read_only=True) as b:
        pd.testing.assert_frame_equal(a.resample_values("demo"), b.resample_values("demo"))
        ids = sorted(a.job_rollouts("demo", JOB))
        assert ids == sorted(b.job_rollouts("demo", JOB)) and len(ids) == 4
        np.testing.assert_array_equal(
            a.job_samples("demo", JOB).column("seed").to_numpy(),
            b.job_samples("demo", JOB).column("seed").to_numpy(),
        )
