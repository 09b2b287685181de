"""A whole-run estimate split over worker processes (`--workers`, backend.core.workers) gives the same rows as
one process: the same token rows (byte for byte in the Parquet file), the same cache and credit summaries,
the same trends, on a real multi-step run whose chunks cut across steps and groups."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from backend.core import workers as work
from backend.core.chunks import plan
from backend.credit import estimates
from backend.credit.token_rows import token_tables
from backend.ingest import import_records
from backend.store import Store, StoreHandle
from tests.conftest import make_records, run_cli_here

TWO = work.Workers(count=2)


@pytest.fixture(scope="module")
def db(tmp_path_factory) -> Path:
    """Four steps of six groups of four: 96 rollouts, chunks of 10 cut 10 group chunks (step scope: 4)."""
    path = tmp_path_factory.mktemp("workers") / "runs.duckdb"
    with Store(path) as store:
        import_records(store, "multi", make_records(n_groups=6, group_size=4, seed=7, steps=4))
    return path


def _rows(db: Path, name: str, workers: work.Workers, chunk: int = 10) -> pa.Table:
    handle = StoreHandle(db)
    tables = token_tables(handle, "multi", name, None, chunk_rollouts=chunk, use_cache=False, workers=workers)
    return pa.concat_tables(tables.tables())


@pytest.mark.parametrize("name", ["grpo", "stare"])  # group scope, step scope
def test_two_workers_give_the_rows_of_one_process(db, name):
    with Store(db, read_only=True) as store:
        index = store.rollout_keys("multi")
    scope = estimates.scope_of(name, None)
    assert len(plan(index, scope, 10)) >= 4  # several chunks, so the split has something to split
    one = _rows(db, name, work.IN_PROCESS)
    two = _rows(db, name, TWO)
    assert one.num_rows > 96  # every real token of the run
    assert two.equals(one)


def test_the_split_only_starts_workers_for_a_job_that_needs_them():
    default = work.Workers()
    assert default.for_job(1, 10**9) == 1  # one chunk: this process
    assert default.for_job(40, 100) == 1  # a small run with the count left to the default: this process
    assert default.for_job(40, None) == 1  # a run of unknown size, too
    # a big one: every core but the writer's (a 2-core machine: this process)
    assert default.for_job(40, 10**9) == max(1, min(work.machine_cores() - 1, 40))
    assert work.Workers(count=3).for_job(40, 100) == 3  # asked for: given
    assert work.Workers(count=8).for_job(2, 100) == 2  # never more workers than chunks


def test_cli_estimate_and_trends_with_two_workers_equal_one(db, tmp_path):
    outs = {}
    for n in (1, 2):
        out = tmp_path / f"w{n}.parquet"
        done = run_cli_here(
            "estimate", "--db", db, "--run", "multi", "--estimator", "grpo", "--no-cache", "--chunk", "10",
            "--workers", n, "--out", out,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr
        outs[n] = out.read_bytes()
    assert outs[1] == outs[2]
    trends = {}
    for n in (1, 2):
        copy = tmp_path / f"t{n}.duckdb"  # each from an empty cache, so each computes and saves
        copy.write_bytes(db.read_bytes())
        done = run_cli_here(
            "trends", "--db", copy, "--run", "multi", "--estimator", "stare", "--workers", n, "--json"
        )
        assert done.returncode == 0, done.stderr
        trends[n] = json.loads(done.stdout)
        with Store(copy, read_only=True) as store:  # what the command saved: outputs and summaries
            trends[n, "cache"] = [
                store.con.execute(f"SELECT * EXCLUDE (created) FROM {t} ORDER BY ALL").fetchall()
                if t == "estimates"
                else store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                for t in ("estimates", "credit_summary")
            ]
    assert trends[1] == trends[2]
    assert trends[1, "cache"] == trends[2, "cache"]
    saved = [row for row in trends[1, "cache"][0] if row[1] == "stare"]
    assert len(saved) == 96  # the whole run was saved, not an empty cache twice


def test_a_bad_worker_count_is_one_line_and_exit_2(db, tmp_path):
    done = run_cli_here(
        "estimate", "--db", db, "--run", "multi", "--workers", "0", "--out", tmp_path / "x.parquet"
    )
    assert done.returncode == 2
    assert "--workers" in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_python_api_splits_as_the_command_line(db):
    import creditlens  # noqa: PLC0415 - the notebook API, as a user imports it

    rows = creditlens.open(db, workers=2).run("multi").estimate("stare", use_cache=False)  # 4 chunks: steps
    assert creditlens.open(db, workers=2).workers == work.Workers(count=2)
    one = _rows(db, "stare", work.IN_PROCESS).to_pandas()
    assert rows.equals(one)
