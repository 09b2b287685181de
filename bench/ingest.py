"""`python -m bench ingest [--tokens N]`: import speed of a native Parquet run, against naive inserts.

Measured in one run:
- the importer (`import_path`, vectorized Parquet path, staged chunks) on a ~10M-token run;
- a naive row-by-row insert (one INSERT per rollout with python lists) on a 50k-token slice;
- the storage layout question: one row per rollout with LIST columns (what the store uses) against a
  token table (one row per token), for insert speed, file size and fetching one 4096-token rollout.
"""

from __future__ import annotations

import argparse
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

        table = pa.table({
            "prompt": [f"prompt {(rollout + i) // group}" for i in range(n)],
            "response": ["..."] * n,
            "step": pa.array(((rollout + np.arange(n)) // (group * 64)).astype(np.int64)),
            "token_ids": lists(rng.integers(0, 50_000, size=count, dtype=np.int32), pa.int32()),
            "logprobs": lists(-rng.exponential(1.0, size=count).astype(np.float32), pa.float32()),
            "entropies": lists(rng.exponential(1.0, size=count).astype(np.float32), pa.float32()),
            "rewards": pa.StructArray.from_arrays(
                [pa.array(rng.integers(0, 2, size=n).astype(np.float64)),
                 pa.array(-rng.integers(0, 2, size=n).astype(np.float64))], names=["task", "style"]),
        })
        if writer is None:
            writer = pq.ParquetWriter(path, table.schema)
        writer.write_table(table)
        written += count
        rollout += n
    writer.close()
    return written


def naive_insert(db: Path, source: Path, max_tokens: int) -> tuple[int, float]:
    """One INSERT statement per rollout with python lists (what the importer avoids)."""
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE r (rollout_id INTEGER, prompt VARCHAR, token_ids INTEGER[], logprobs FLOAT[], "
                "entropies FLOAT[], task DOUBLE, style DOUBLE)")
    rows = pq.ParquetFile(source).read_row_group(0).to_pylist()
    tokens = 0
    start = time.perf_counter()
    for i, row in enumerate(rows):
        con.execute("INSERT INTO r VALUES (?, ?, ?, ?, ?, ?, ?)",
                    [i, row["prompt"], row["token_ids"], row["logprobs"], row["entropies"],
                     row["rewards"]["task"], row["rewards"]["style"]])
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
    lists = pa.table({"rollout_id": pa.array(np.arange(n_rollouts, dtype=np.int32)),
                      "token_ids": pa.ListArray.from_arrays(offsets, pa.array(ids)),
                      "logprobs": pa.ListArray.from_arrays(offsets, pa.array(lp))})
    tokens = pa.table({"rollout_id": pa.array(np.repeat(np.arange(n_rollouts, dtype=np.int32), length)),
                       "pos": pa.array(np.tile(np.arange(length, dtype=np.int32), n_rollouts)),
                       "token_id": pa.array(ids), "logprob": pa.array(lp)})
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
    args = parser.parse_args(argv)
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
        print(f"{'naive INSERT per rollout (baseline)':<40} {naive_tokens:>11,} {naive_s:>8.2f} "
              f"{naive_rate:>12,.0f} {1.0:>7.1f}")
        print(f"{'import_path (Arrow, staged chunks)':<40} {total:>11,} {seconds:>8.2f} "
              f"{fast_rate:>12,.0f} {fast_rate / naive_rate:>7.1f}")
        print(f"target: >= 2,000,000 tokens/s -> {'met' if fast_rate >= 2e6 else 'NOT met'}; "
              f"peak RSS of this process {peak_mb:,.0f} MB; {report.records:,} rollouts")
        print()
        print(f"{'layout (512 x 4096 tokens)':<24} {'insert s':>9} {'file MB':>8} {'fetch 1 rollout ms':>19}")
        for name, insert_s, size_mb, fetch_ms in layout_comparison(tmp):
            print(f"{name:<24} {insert_s:>9.2f} {size_mb:>8.1f} {fetch_ms:>19.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
