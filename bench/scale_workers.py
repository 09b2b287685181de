"""The scaling rows of `python -m bench scale --workers N [--ray local:N] [--baseline DIR]`: the same run
imported and estimated with one worker, with N, with the default, on Ray, and by another checkout of Credit
Lens (`--baseline`, e.g. a `git worktree` of an older commit: its own import and estimate, its own store),
each in its own process, in one run of the bench so the ratios share the machine's load.

A worker row's peak MB is the largest of its processes (the command's and its workers': `wait4` reports the
largest resident set of the child and of the descendants it waited for), so it is memory per process.
"1 single-threaded worker" runs with OMP_NUM_THREADS=1, as every split worker does: the ratio of the N-worker
row against it is the split's own scaling, what a wide node multiplies; the default row is what a user gets.
"""

from __future__ import annotations

import os
from pathlib import Path

from bench.children import line, run_child

ESTIMATES = (("grpo", []), ("gae (stored values)", ["--set", "value_source=stored"]))


def scaling_rows(
    source: Path,
    tokens: int,
    tmp: Path,
    workers: int,
    ray: str | None,
    baseline: Path | None,
    estimators: set[str] | None = None,
    label: str = "",
) -> None:
    """Print the rows for the run in `source` (`tokens` tokens); stores go under `tmp`."""
    single = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    plans = [
        (f"1 worker{label}", ["--workers", "1"], None, None),
        (f"{workers} workers{label}", ["--workers", str(workers)], None, None),
        (f"default{label}", [], None, None),
    ]
    if ray:
        plans.append((f"ray {ray}{label}", ["--ray", ray], None, None))
    if baseline is not None:
        plans.append((f"baseline {baseline.name}{label}", [], baseline, None))
    print(f"\nscaling: {_short(tokens)} tokens, load average {os.getloadavg()[0]:.1f} at the start")
    print(
        f"{'row':<54} {'tokens':>11} {'wall s':>7} {'s':>7} {'cpu s':>6} {'tokens/s':>11} {'ratio':>6} "
        f"{'peak MB':>8}"
    )
    stores: dict[str, Path] = {}
    base_rate = None
    for name, flags, checkout, _ in plans:
        db = tmp / f"scale-{len(stores)}.duckdb"
        wall, inner, cpu, rss = run_child(
            ["import", str(source), "--db", str(db), "--run", "big", *flags], cwd=checkout
        )
        base_rate = base_rate or tokens / inner
        line(f"import, {name}", tokens, wall, inner, cpu, rss, base_rate)
        stores[name] = db
    for estimator, extra in ESTIMATES:
        if estimators is not None and estimator not in estimators:
            continue
        base_rate = None
        rows = [(f"1 single-threaded worker{label}", ["--workers", "1"], None, single)] + plans[1:]
        for (name, flags, checkout, env), db in zip(rows, stores.values(), strict=True):
            out = tmp / "scale-out.parquet"
            command = ["estimate", "--db", str(db), "--run", "big", "--estimator", estimator.split()[0]]
            wall, inner, cpu, rss = run_child(
                [*command, *extra, "--no-cache", "--out", str(out), *flags], cwd=checkout, env=env
            )
            base_rate = base_rate or tokens / inner
            line(f"estimate {estimator}, {name}", tokens, wall, inner, cpu, rss, base_rate)
    print(f"load average after the scaling rows: {os.getloadavg()[0]:.1f}")


def _short(tokens: int) -> str:
    return f"{tokens / 1e6:.1f}M" if tokens >= 1_000_000 else f"{tokens:,}"
