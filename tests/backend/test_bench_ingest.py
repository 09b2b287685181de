"""`python -m bench ingest`'s formats table: each format's file imports as that format with the tokens it was
written with, and the table runs end to end on a tiny run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from backend.ingest import detect_format, import_path
from bench.format_files import write_native, write_nemo_rl, write_prime_rl, write_rl_logging_board, write_verl
from bench.ingest import FORMAT_ROWS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("writer", "fmt"),
    [
        (write_nemo_rl, "nemo-rl"),
        (write_prime_rl, "prime-rl"),
        (write_rl_logging_board, "rl-logging-board"),
        (write_verl, "verl"),
    ],
)
def test_each_dump_is_its_format(store, tmp_path, writer, fmt):
    path = writer(tmp_path / fmt, 5_000)
    assert detect_format(path) == fmt
    report = import_path(store, path, "r")
    assert report.records >= 8 and report.tokens >= 5_000


def test_the_native_files_hold_the_same_run(store, tmp_path):
    jsonl, parquet = write_native(tmp_path, 5_000)
    first, second = import_path(store, jsonl, "jsonl"), import_path(store, parquet, "parquet")
    assert (first.records, first.tokens) == (second.records, second.tokens) and first.tokens >= 5_000
    assert {fmt for _, _, fmt in FORMAT_ROWS.values()} >= {"native", "verl", "nemo-rl", "prime-rl"}


@pytest.mark.slow
def test_bench_ingest_formats_table_runs():
    command = [sys.executable, "-m", "bench", "ingest", "--only-formats", "--format-tokens", "3000"]
    out = subprocess.run(
        [*command, "--repeat", "1", "--formats", "native-jsonl,verl"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith(("native JSONL", "verl"))]
    assert len(rows) == 2 and all(float(row.split()[-6]) > 0 for row in rows)
