"""An import split over worker processes (`--workers`, backend.ingest.split_import) stores the same rows as
one process: native Parquet (row groups converted by the workers) and native JSONL (blocks of lines), ids,
groups, scores, per-token columns and the Explorer's summaries alike."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from backend.ingest import arrow_jsonl, split_import
from backend.store import Store
from bench.scale import write_run
from tests.conftest import run_cli_here

TABLES = (
    "rollouts",
    "groups",
    "scores",
    "token_rewards",
    "token_features",
    "rollout_metrics",
    "rollout_summary",
)


def _stored(db: Path) -> dict[str, list]:
    with Store(db, read_only=True) as store:
        return {t: store.con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}


def _imported(source: Path, db: Path, workers: int) -> dict[str, list]:
    done = run_cli_here("import", source, "--db", db, "--run", "r", "--workers", workers)
    assert done.returncode == 0, done.stderr
    return _stored(db)


@pytest.fixture(scope="module")
def parquet_run(tmp_path_factory) -> Path:
    """10,240 short rollouts in row groups of 1,024 (three pieces of whole row groups), 8 to a group."""
    path = tmp_path_factory.mktemp("split") / "run.parquet"
    write_run(path, None, 80_000, mean_len=8, text=True)
    pieces = split_import.parquet_pieces(pq.ParquetFile(path), path, None, 2048)
    assert len(pieces) >= 2
    assert not split_import.convert_parquet(pieces[-1]).unsupported  # the workers' path, not the fallback
    return path


@pytest.fixture
def pieces_of_2048(monkeypatch):
    """Chunks (and the workers' pieces) of 2,048 records whatever the rollouts' length, so a small file of
    short rollouts is split in several pieces (`native.chunk_rows` would read it in one)."""
    from backend.ingest import native  # noqa: PLC0415

    monkeypatch.setattr(native, "MOST_RECORDS_FACTOR", 1)


def test_parquet_import_with_two_workers_stores_the_rows_of_one(parquet_run, tmp_path, pieces_of_2048):
    one = _imported(parquet_run, tmp_path / "one.duckdb", 1)
    two = _imported(parquet_run, tmp_path / "two.duckdb", 2)
    assert len(one["rollouts"]) == pq.ParquetFile(parquet_run).metadata.num_rows
    assert len(one["groups"]) == len(one["rollouts"]) // 8
    assert two == one


def test_jsonl_import_with_two_workers_stores_the_rows_of_one(tmp_path, monkeypatch):
    source = tmp_path / "run.jsonl"
    records = pq.read_table(_records_run(tmp_path)).to_pylist()
    with open(source, "w") as fh:
        for i, record in enumerate(records):
            fh.write(json.dumps(record) + "\n")
            if i % 700 == 3:
                fh.write("\n")  # blank lines count as no record, in the worker's numbering too
    monkeypatch.setattr(arrow_jsonl, "BLOCK_BYTES", 256 << 10)  # several blocks of a small file
    pieces = list(split_import.jsonl_pieces(source, None))
    assert len(pieces) >= 3
    assert sum(p.records for p in pieces) == len(records)
    assert not any(split_import.convert_jsonl(p).unsupported for p in pieces)  # the workers' path
    one = _imported(source, tmp_path / "one.duckdb", 1)
    two = _imported(source, tmp_path / "two.duckdb", 2)
    assert len(one["rollouts"]) == len(records)
    assert two == one


def _records_run(folder: Path) -> Path:
    path = folder / "records.parquet"
    write_run(path, None, 24_000, mean_len=8, seed=3)
    return path


def test_a_bad_record_in_a_worker_piece_is_one_line_naming_it_and_nothing_is_stored(
    parquet_run, tmp_path, pieces_of_2048
):
    table = pq.read_table(parquet_run)
    logprobs = table.column("logprobs").to_pylist()
    logprobs[9000][0] = float("nan")  # in the last piece
    bad = tmp_path / "bad.parquet"
    broken = table.set_column(
        table.schema.get_field_index("logprobs"), "logprobs", pa.array(logprobs, pa.list_(pa.float32()))
    )
    pq.write_table(broken, bad, row_group_size=1024)
    db = tmp_path / "bad.duckdb"
    done = run_cli_here("import", bad, "--db", db, "--run", "r", "--workers", 2)
    assert done.returncode == 2
    assert len(done.stderr.strip().splitlines()) == 1
    assert "record 9001" in done.stderr and "logprobs" in done.stderr
    assert not db.exists() or not _stored(db)["rollouts"]


def test_a_file_of_short_rollouts_is_read_in_chunks_of_tokens_not_of_2048_records(tmp_path, monkeypatch):
    """A chunk is one commit of nearly fixed cost: short rollouts fill it by tokens (at the file's mean
    length, from its footer) up to 16x the record count; long ones keep the record count. The rows stored are
    the same whatever the chunk."""
    from backend.ingest import native  # noqa: PLC0415

    short, long = tmp_path / "short.parquet", tmp_path / "long.parquet"
    write_run(short, None, 200_000, mean_len=40)  # ~5,000 rollouts of 10-70 tokens
    write_run(long, None, 200_000, mean_len=512)
    assert native.chunk_rows(pq.ParquetFile(short), 2048, 1_000_000) in range(24_000, 26_000)  # 1M at ~40
    assert native.chunk_rows(pq.ParquetFile(short), 2048, 10_000_000) == 16 * 2048  # capped
    assert native.chunk_rows(pq.ParquetFile(long), 2048, 1_000_000) == 2048
    assert native.chunk_rows(pq.ParquetFile(short), 2048, None) == 2048
    big = _imported(short, tmp_path / "big.duckdb", 1)  # one chunk of ~5,000 records
    monkeypatch.setattr(native, "MOST_RECORDS_FACTOR", 1)
    small = _imported(short, tmp_path / "small.duckdb", 1)  # three of 2,048
    assert big == small
