"""`python -m bench scale` still runs end to end on a tiny run: the whole-run table of docs/benchmarks.md
comes from it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_bench_scale_runs_streamed_rows_with_text():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            "scale",
            "--tokens",
            "20000",
            "--jsonl-tokens",
            "0",
            "--text",
            "--streamed-only",
            "--estimators",
            "grpo",
            "--chunk",
            "8",
            "--small-tokens",
            "5000",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = {line[:54].strip(): line.split() for line in out.stdout.splitlines()}
    assert "import native Parquet" in rows
    streamed = rows["estimate grpo, streamed"]
    assert int(streamed[-7].replace(",", "")) >= 20_000  # tokens of the run
    assert float(streamed[-2]) == pytest.approx(1.0)  # its own baseline under --streamed-only
    lines = out.stdout.splitlines()
    assert any(line.startswith("estimate grpo, streamed, ") and "-token run" in line for line in lines)
    assert any(line.startswith("estimate grpo, one group (the fixed cost)") for line in lines)
    floor = lines.index(next(line for line in lines if line.startswith("I/O floor")))
    assert [line.split()[0] for line in lines[floor + 2 : floor + 4]] == ["grpo", "grpo,"]
