"""`python -m bench explorer [--tokens N] [--db PATH]`: the Explorer's queries on a large synthetic run,
against loading the run into pandas, measured in the same run.

1. Writes a native Parquet run of N tokens (default 10M; ~1024 tokens per response, groups of 8, 64 groups
   per step, response text of words) and imports it (the import fills `rollout_summary`), then computes
   `grpo` over the whole run (saving it fills `credit_summary`). Times both, with peak memory.
2. In a fresh process: the Explorer's warm queries (first page, a sort by a credit share, a search, a
   range filter, the trends) through `backend.views.explorer`, each the median of 3 after one warm-up, with
   the process's peak memory.
3. In another fresh process, the baseline: the run loaded into pandas (`SELECT * FROM rollouts` + scores)
   and the same first page computed there (lengths, mean entropy, sort), with its peak memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from backend.credit import estimates
from backend.ingest import import_path
from backend.store import Store, StoreHandle
from backend.store.explorer_queries import fill_rollout_summary
from backend.views import explorer

WORDS = np.array(
    [
        "the",
        "so",
        "carry",
        "answer",
        "step",
        "obviously",
        "let",
        "me",
        "think",
        "sum",
        "is",
        "=",
        "+",
        "\n",
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "7",
        "8",
        "9",
        "0",
        "check",
        "again",
    ]
)


def write_run(path: Path, total_tokens: int, seed: int = 0, mean_len: int = 1024, group: int = 8) -> int:
    """A native Parquet run: token ids, logprobs, ref logprobs, entropies, word text, two channels."""
    rng = np.random.default_rng(seed)
    writer, written, rollout = None, 0, 0
    while written < total_tokens:
        n = 1024
        lengths = rng.integers(mean_len // 4, mean_len * 7 // 4, size=n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        count = int(offsets[-1])
        ids = rng.integers(0, len(WORDS), size=count, dtype=np.int32)
        text = [" ".join(WORDS[ids[offsets[i] : offsets[i + 1]]]) for i in range(n)]

        def lists(values, type_, offsets=offsets):
            return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type_))

        logprobs = -rng.exponential(1.0, size=count).astype(np.float32)
        table = pa.table(
            {
                "prompt": [f"prompt {(rollout + i) // group}" for i in range(n)],
                "response": text,
                "step": pa.array(((rollout + np.arange(n)) // (group * 64)).astype(np.int64)),
                "group": pa.array(((rollout + np.arange(n)) // group).astype(np.int64)),
                "token_ids": lists(ids, pa.int32()),
                "logprobs": lists(logprobs, pa.float32()),
                "ref_logprobs": lists(
                    logprobs - rng.normal(0.05, 0.1, size=count).astype(np.float32), pa.float32()
                ),
                "entropies": lists(rng.exponential(1.0, size=count).astype(np.float32), pa.float32()),
                "rewards": pa.StructArray.from_arrays(
                    [
                        pa.array(rng.integers(0, 2, size=n).astype(np.float64)),
                        pa.array(-rng.integers(0, 2, size=n).astype(np.float64)),
                    ],
                    names=["task", "style"],
                ),
            }
        )
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        written += count
        rollout += n
    writer.close()
    return written


def peak_mb() -> float:
    """This process's peak resident memory (VmHWM: unlike ru_maxrss, not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn, repeats: int = 3) -> float:
    fn()  # warm-up: caches, summaries
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def phase_queries(db: str) -> dict:
    handle = StoreHandle(db)
    q = explorer.ExplorerQuery
    shares = explorer.rollout_table(handle, "big", q(estimator="grpo", limit=1)).columns
    share = next(c for c in shares if c.startswith("share_") and c != "share_key")
    cases = {
        "explorer table, first page of 50": q(estimator="grpo"),
        f"sort by {share}, descending": q(estimator="grpo", sort=share, descending=True),
        "search 'obviously let me' in prompt+response": q(estimator="grpo", search="obviously let me"),
        "filter length>=1500 and kl>0.05, sort by kl": q(
            estimator="grpo",
            sort="kl",
            filters=(explorer.Filter("length", ">=", 1500), explorer.Filter("kl", ">", 0.05)),
        ),
    }
    out = {
        name: timed(lambda query=query: explorer.rollout_table(handle, "big", query))
        for name, query in cases.items()
    }
    out["trends (one row per step, with quantiles)"] = timed(
        lambda: explorer.step_trends(handle, "big", "grpo")
    )
    out["trends without the advantage quantiles"] = timed(
        lambda: explorer.step_trends(handle, "big", "grpo", quantiles=False)
    )
    return {"times": out, "peak_mb": peak_mb()}


def phase_pandas(db: str) -> dict:
    def load_and_page():
        with Store(db, read_only=True) as store:
            run_id = store.run_id("big")
            frame = store.con.execute("SELECT * FROM rollouts WHERE run_id = ?", [run_id]).df()
            scores = store.con.execute(
                "SELECT rollout_id, channel, score FROM scores WHERE run_id = ?", [run_id]
            ).df()
        wide = scores.pivot(index="rollout_id", columns="channel", values="score").add_prefix("score_")
        frame = frame.join(wide, on="rollout_id")
        frame["length"] = frame["token_ids"].map(len)
        frame["mean_entropy"] = frame["entropies"].map(np.mean)
        return frame.sort_values("mean_entropy").head(50)

    start = time.perf_counter()
    load_and_page()
    first = time.perf_counter() - start
    return {
        "times": {"load the run into pandas + the first page": min(first, timed(load_and_page, 1))},
        "peak_mb": peak_mb(),
    }


def run_phase(phase: str, db: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "bench.explorer", "--phase", phase, "--db", db],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    if done.returncode != 0:
        raise RuntimeError(done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench explorer")
    parser.add_argument("--tokens", type=int, default=10_000_000)
    parser.add_argument("--db", default=None, help="reuse (or build) this store instead of a temporary one")
    parser.add_argument("--phase", choices=("queries", "pandas"), default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase is not None:
        print(json.dumps(phase_queries(args.db) if args.phase == "queries" else phase_pandas(args.db)))
        return 0

    tmp = tempfile.TemporaryDirectory(prefix="bench-explorer-")
    db = args.db or os.path.join(tmp.name, "runs.duckdb")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with Store(db) as store:
        fresh = not store.has_run("big")
    if fresh:
        source = Path(tmp.name) / "big.parquet"
        start = time.perf_counter()
        tokens = write_run(source, args.tokens)
        print(f"wrote {tokens:,} tokens in {time.perf_counter() - start:.1f} s")
        with Store(db) as store:
            start = time.perf_counter()
            report = import_path(store, source, "big")
            print(
                f"import (fills rollout_summary): {report.records:,} rollouts in "
                f"{time.perf_counter() - start:.1f} s"
            )
            start = time.perf_counter()
            with store.transaction():
                fill_rollout_summary(store, store.run_id("big"))
            print(f"  of which the summary SQL alone: {time.perf_counter() - start:.1f} s")
        start = time.perf_counter()
        estimates.estimate_rollouts(StoreHandle(db), "big", "grpo")
        print(
            f"grpo over the whole run, saved with its credit summary: {time.perf_counter() - start:.1f} s; "
            f"peak memory of this process so far {peak_mb():,.0f} MB"
        )
    size = os.path.getsize(db) / 2**20
    queries = run_phase("queries", db)
    pandas = run_phase("pandas", db)
    baseline = next(iter(pandas["times"].values()))
    print(f"\nstore {size:,.0f} MB; each query: median of 3 warm calls, a fresh connection each (as the app)")
    print(f"{'measurement':<50} {'seconds':>8} {'ratio':>8}")
    for name, seconds in pandas["times"].items():
        print(f"{name + ' (baseline)':<50} {seconds:>8.3f} {1.0:>8.1f}")
    for name, seconds in queries["times"].items():
        print(f"{name:<50} {seconds:>8.3f} {baseline / seconds:>8.1f}")
    print(
        f"peak memory: explorer process {queries['peak_mb']:,.0f} MB, "
        f"pandas process {pandas['peak_mb']:,.0f} MB"
    )
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
