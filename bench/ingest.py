"""`python -m bench ingest [--tokens N]`: import speed of a native Parquet run, against naive inserts.

Measured in one run:
- the importer (`import_path`, vectorized Parquet path, staged chunks) on a ~10M-token run;
- a naive row-by-row insert (one INSERT per rollout with python lists) on a 50k-token slice;
- the storage layout question: one row per rollout with LIST columns (what the store uses) against a
  token table (one row per token), for insert speed, file size and fetching one 4096-token rollout;
- a TRL completions log of `--trl-rollouts` rows (synthetic, TRL 1.16's schema: step, prompt,
  completion, two float reward columns with NaN, an int and a string `log_extra` column, advantage;
  one file per step) through the TRL importer, against the per-record native JSONL importer on the
  same rollouts; each import runs in its own process so that its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from backend.ingest import import_path
from backend.store import Store


def write_run(path: Path, total_tokens: int, seed: int = 0, mean_len: int = 1024, group: int = 8) -> int:
    """A native Parquet run with ragged lengths: token_ids, logprobs, entropies, two channels."""
    rng = np.random.default_rng(seed)
    writer = None
    written = 0
    rollout = 0
    while written < total_tokens:
        n = 2048
        lengths = rng.integers(mean_len // 4, mean_len * 7 // 4, size=n)
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        count = int(offsets[-1])

        def lists(values, type_, offsets=offsets):
            return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values, type_))

        table = pa.table(
            {
                "prompt": [f"prompt {(rollout + i) // group}" for i in range(n)],
                "response": ["..."] * n,
                "step": pa.array(((rollout + np.arange(n)) // (group * 64)).astype(np.int64)),
                "token_ids": lists(rng.integers(0, 50_000, size=count, dtype=np.int32), pa.int32()),
                "logprobs": lists(-rng.exponential(1.0, size=count).astype(np.float32), pa.float32()),
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


TRL_PER_STEP = 16_384


def write_trl_logs(directory: Path, rollouts: int, seed: int = 0, group: int = 8) -> Path:
    """Synthetic TRL completion logs (`completions_{step:05d}.parquet`) and the same rollouts as one
    native JSONL file; returns the JSONL path."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    native = directory.parent / "native.jsonl"
    words = np.array(["the", "sum", "is", "carry", "1", "12", "so", "answer", "=", "+", "\n", "####"])
    with open(native, "w") as out:
        for step, start in enumerate(range(0, rollouts, TRL_PER_STEP), start=1):
            n = min(TRL_PER_STEP, rollouts - start)
            picks = rng.integers(0, len(words), size=(n, 24))
            completions = [" ".join(row) for row in words[picks]]
            prompts = [
                f"question {(start + i) // group}: what is {(start + i) // group} + 7?" for i in range(n)
            ]
            missing_a = rng.random(n) < 0.1  # a reward function that returned None (NaN)
            a = np.where(missing_a, np.nan, rng.integers(0, 2, n).astype(np.float64))
            b = np.where(~missing_a & (rng.random(n) < 0.1), np.nan, rng.random(n))
            table = pa.table(
                {
                    "step": pa.array(np.full(n, step, dtype=np.int64)),
                    "prompt": prompts,
                    "completion": completions,
                    "accuracy_reward": a,
                    "format_reward": b,
                    "n_chars": pa.array([len(c) for c in completions], pa.int64()),
                    "source": ["synthetic"] * n,
                    "advantage": rng.normal(size=n),
                }
            )
            pq.write_table(table, directory / f"completions_{step:05d}.parquet")
            for i in range(n):
                rewards = {
                    k: float(v) for k, v in (("accuracy_reward", a[i]), ("format_reward", b[i])) if v == v
                }
                out.write(
                    json.dumps(
                        {
                            "prompt": prompts[i],
                            "response": completions[i],
                            "step": step,
                            "group": (start + i) // group,
                            "rewards": rewards,
                        }
                    )
                    + "\n"
                )
    return native


def _timed_import(source: str, db: str, fmt: str, queue) -> None:
    with Store(db) as store:
        start = time.perf_counter()
        report = import_path(store, source, "bench", fmt=fmt)
        seconds = time.perf_counter() - start
    queue.put((report.records, report.tokens, seconds, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))


def import_in_child(source: Path, db: Path, fmt: str) -> tuple[int, int, float, float]:
    """(records, tokens, seconds, peak RSS MB) of one import in a fresh process."""
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=_timed_import, args=(str(source), str(db), fmt, queue))
    proc.start()
    records, tokens, seconds, rss_kb = queue.get()
    proc.join()
    return records, tokens, seconds, rss_kb / 1024


def trl_comparison(tmp: Path, rollouts: int) -> None:
    native = write_trl_logs(tmp / "trl" / "completions", rollouts)
    rows = [
        ("native JSONL, per record (baseline)", *import_in_child(native, tmp / "n.duckdb", "native")),
        ("TRL completions log", *import_in_child(tmp / "trl", tmp / "trl.duckdb", "trl")),
    ]
    base_rate = rows[0][2] / rows[0][3]
    print(
        f"{'TRL import, simple tokenization':<40} {'rollouts':>10} {'tokens':>11} {'seconds':>8} "
        f"{'tokens/s':>10} {'ratio':>6} {'peak RSS MB':>12}"
    )
    for name, records, tokens, seconds, rss in rows:
        print(
            f"{name:<40} {records:>10,} {tokens:>11,} {seconds:>8.1f} {tokens / seconds:>10,.0f} "
            f"{tokens / seconds / base_rate:>6.2f} {rss:>12,.0f}"
        )


def naive_insert(db: Path, source: Path, max_tokens: int) -> tuple[int, float]:
    """One INSERT statement per rollout with python lists (what the importer avoids)."""
    con = duckdb.connect(str(db))
    con.execute(
        "CREATE TABLE r (rollout_id INTEGER, prompt VARCHAR, token_ids INTEGER[], logprobs FLOAT[], "
        "entropies FLOAT[], task DOUBLE, style DOUBLE)"
    )
    rows = pq.ParquetFile(source).read_row_group(0).to_pylist()
    tokens = 0
    start = time.perf_counter()
    for i, row in enumerate(rows):
        con.execute(
            "INSERT INTO r VALUES (?, ?, ?, ?, ?, ?, ?)",
            [
                i,
                row["prompt"],
                row["token_ids"],
                row["logprobs"],
                row["entropies"],
                row["rewards"]["task"],
                row["rewards"]["style"],
            ],
        )
        tokens += len(row["token_ids"])
        if tokens >= max_tokens:
            break
    seconds = time.perf_counter() - start
    con.close()
    return tokens, seconds


def layout_comparison(
    workdir: Path, n_rollouts: int = 512, length: int = 4096
) -> list[tuple[str, float, float, float]]:
    """List columns vs a token table: insert s, file MB, fetch of one rollout in ms (median of 50)."""
    rng = np.random.default_rng(1)
    count = n_rollouts * length
    offsets = pa.array(np.arange(0, count + 1, length, dtype=np.int32))
    ids = rng.integers(0, 50_000, size=count, dtype=np.int32)
    lp = rng.standard_normal(count).astype(np.float32)
    lists = pa.table(
        {
            "rollout_id": pa.array(np.arange(n_rollouts, dtype=np.int32)),
            "token_ids": pa.ListArray.from_arrays(offsets, pa.array(ids)),
            "logprobs": pa.ListArray.from_arrays(offsets, pa.array(lp)),
        }
    )
    tokens = pa.table(
        {
            "rollout_id": pa.array(np.repeat(np.arange(n_rollouts, dtype=np.int32), length)),
            "pos": pa.array(np.tile(np.arange(length, dtype=np.int32), n_rollouts)),
            "token_id": pa.array(ids),
            "logprob": pa.array(lp),
        }
    )
    out = []
    for name, table, fetch in (
        ("list columns (store)", lists, "SELECT token_ids, logprobs FROM t WHERE rollout_id = ?"),
        ("token table", tokens, "SELECT token_id, logprob FROM t WHERE rollout_id = ? ORDER BY pos"),
    ):
        path = workdir / f"layout_{name.split()[0]}.duckdb"
        con = duckdb.connect(str(path))
        start = time.perf_counter()
        con.register("src", table)
        con.execute("CREATE TABLE t AS SELECT * FROM src")
        con.execute("CHECKPOINT")
        insert_s = time.perf_counter() - start
        times = []
        for _ in range(50):
            t0 = time.perf_counter()
            con.sql(fetch, params=[int(rng.integers(0, n_rollouts))]).to_arrow_table()
            times.append(time.perf_counter() - t0)
        con.close()
        out.append((name, insert_s, path.stat().st_size / 1e6, 1000 * float(np.median(times))))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench ingest")
    parser.add_argument("--tokens", type=int, default=10_000_000)
    parser.add_argument("--naive-tokens", type=int, default=50_000)
    parser.add_argument(
        "--trl-rollouts",
        type=int,
        default=1_000_000,
        help="rows of the synthetic TRL log (0: skip that table)",
    )
    parser.add_argument("--only-trl", action="store_true", help="only the TRL table")
    args = parser.parse_args(argv)
    if args.only_trl:
        with tempfile.TemporaryDirectory() as tmp:
            trl_comparison(Path(tmp), args.trl_rollouts)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source = tmp / "run.parquet"
        total = write_run(source, args.tokens)
        with Store(tmp / "store.duckdb") as store:
            start = time.perf_counter()
            report = import_path(store, source, "bench")
            seconds = time.perf_counter() - start
            assert report.tokens == total
        naive_tokens, naive_s = naive_insert(tmp / "naive.duckdb", source, args.naive_tokens)
        fast_rate, naive_rate = total / seconds, naive_tokens / naive_s
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{'method':<40} {'tokens':>11} {'seconds':>8} {'tokens/s':>12} {'ratio':>7}")
        print(
            f"{'naive INSERT per rollout (baseline)':<40} {naive_tokens:>11,} {naive_s:>8.2f} "
            f"{naive_rate:>12,.0f} {1.0:>7.1f}"
        )
        print(
            f"{'import_path (Arrow, staged chunks)':<40} {total:>11,} {seconds:>8.2f} "
            f"{fast_rate:>12,.0f} {fast_rate / naive_rate:>7.1f}"
        )
        print(
            f"target: >= 2,000,000 tokens/s -> {'met' if fast_rate >= 2e6 else 'NOT met'}; "
            f"peak RSS of this process {peak_mb:,.0f} MB; {report.records:,} rollouts"
        )
        print()
        print(f"{'layout (512 x 4096 tokens)':<24} {'insert s':>9} {'file MB':>8} {'fetch 1 rollout ms':>19}")
        for name, insert_s, size_mb, fetch_ms in layout_comparison(tmp):
            print(f"{name:<24} {insert_s:>9.2f} {size_mb:>8.1f} {fetch_ms:>19.2f}")
        if args.trl_rollouts:
            print()
            trl_comparison(tmp, args.trl_rollouts)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
