"""`python -m bench runs [--tokens N]`: runs side by side at size, against the targets of
docs/benchmarks.md ("Runs side by side"). Three runs of N tokens each (default 1M; `bench.ingest.write_run`,
seeds 0-2) in a tmp store, then:

1. the commands as a user runs them, each a new process (so the time includes Python's start and the
   imports): `creditlens trends` on one run and on the three, and `creditlens compare-runs` on the three
   (target: within 2 s), each twice: cold (the first call computes and stores the credit summaries) and
   warm (they are stored);
2. the Trends view in headless Chromium, fresh loads of one run against the three side by side (target:
   within 1.5x), medians of 3 loads after a first visit, in the same minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from app.server.launch import Server
from backend.ingest import import_path
from backend.store import Store
from bench.app_load import fresh_load
from bench.chromium import launch
from bench.ingest import write_run

ROOT = Path(__file__).resolve().parents[1]
RUNS = ("r0", "r1", "r2")


def _command(db: Path, *args: str) -> float:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "backend.cli", *args, "--db", str(db), "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "CREDITLENS_WARMUP": "0"},
    )
    if done.returncode != 0:
        raise RuntimeError(f"creditlens {' '.join(args)}: {done.stderr[-2000:]}")
    return time.perf_counter() - start


def commands(db: Path) -> list[tuple[str, float, float]]:
    every = [a for r in RUNS for a in ("--run", r)]
    cases = [
        ("trends, one run", ["trends", "--run", RUNS[0]]),
        ("trends, three runs", ["trends", *every]),
        ("compare-runs, three runs", ["compare-runs", *every]),
    ]
    return [(name, _command(db, *args), _command(db, *args)) for name, args in cases]


def views(db: Path, tmp: Path, rounds: int = 3) -> list[tuple[str, float, float]]:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - browser only

    paths = {
        "Trends, one run": f"trends?run={RUNS[0]}",
        "Trends, three runs": f"trends?run={RUNS[0]}&runs=r0,r1,r2",
    }
    times: dict[str, list[float]] = {name: [] for name in paths}
    with Server(db, log=tmp / "app.log") as app, sync_playwright() as p:
        browser = launch(p)
        for _ in range(rounds + 1):  # interleaved: both see the same machine load
            for name, path in paths.items():
                times[name].append(fresh_load(browser, f"{app.url}/{path}", timeout=600)[1])
        browser.close()
    return [(name, loads[0], statistics.median(loads[1:])) for name, loads in times.items()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench runs")
    parser.add_argument("--tokens", type=int, default=1_000_000, help="tokens per run")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        db = tmp / "runs.duckdb"
        with Store(db) as store:
            for seed, run in enumerate(RUNS):
                source = tmp / f"{run}.parquet"
                write_run(source, args.tokens, seed=seed)
                import_path(store, source, run)
        print(
            f"three runs of {args.tokens:,} tokens; "
            f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
        )
        rows = commands(db)
        base = rows[0][2]
        print(f"\n{'command (a new process each)':<30} {'cold s':>8} {'warm s':>8} {'warm / one run':>15}")
        for name, cold, warm in rows:
            print(f"{name:<30} {cold:8.2f} {warm:8.2f} {warm / base:15.2f}")
        print("target: compare-runs on the three within 2 s")
        shown = views(db, tmp)
        one = shown[0][2]
        print(f"\n{'Trends view (fresh load)':<30} {'first s':>8} {'median s':>8} {'/ one run':>10}")
        for name, first, median in shown:
            print(f"{name:<30} {first:8.2f} {median:8.2f} {median / one:10.2f}")
        print("target: the three runs within 1.5x the one run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
