"""`python -m bench ingest [--tokens N]`: import speed of every format against pyarrow's parse of the same
files, and of a native Parquet run against naive inserts.

Measured in one run:
- every import format on a run of `--format-tokens` tokens (ragged responses, groups of 8, 64 groups a
  step): native JSONL and native Parquet (token ids, logprobs, entropies, two channels), NeMo-RL,
  prime-rl and RL Logging Board token dumps and a verl rollout dump (text only: simple tokenization),
  each written as its trainer writes it (`bench/format_files.py`). Each import runs in its own process
  (`creditlens import`'s steps: open the store, import, close it), timed from after the process's
  imports, with its peak RSS; pyarrow's own parse of the same files (`pyarrow.json.read_json`,
  `pyarrow.parquet.read_table`) runs in a process of its own too. The time spent turning text into token
  ids and labels (the tokenizer's `encode` and `display`, RL Logging Board's token strings to ids) is
  timed apart, inside the import; `x parse, CPU s` compares the two processes' CPU time (every
  thread's), which another job on the machine changes far less than wall time. Two reference rows: the
  import of a one-record file (the fixed part: store, migrations, run rows, summary) and the store's write
  alone of the native Parquet run's rows;
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
from collections.abc import Callable
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.json as pj
import pyarrow.parquet as pq

from backend.ingest import import_path, token_dumps
from backend.ingest.tokenize import Tokenizer
from backend.store import Store
from bench.format_files import write_native, write_nemo_rl, write_prime_rl, write_rl_logging_board, write_verl


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
    queue.put((report.records, report.tokens, seconds, _peak_rss_mb() * 1024))


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


# --- every format against pyarrow's parse of the same files ------------------------------------------


def _tokenization_timer() -> Callable[[], float]:
    """Time spent turning text into token ids and labels from here on (the wrapped functions' total)."""
    spent = [0.0]

    def timed(fn):
        def wrapper(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - start

        return wrapper

    Tokenizer.encode = timed(Tokenizer.encode)
    Tokenizer.display = timed(Tokenizer.display)
    token_dumps._board_ids = timed(token_dumps._board_ids)
    return lambda: spent[0]


def _peak_rss_mb() -> float:
    """This process's own peak RSS (VmHWM: `ru_maxrss` of a spawned child counts its parent's at the fork)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _cpu_seconds() -> float:
    """CPU time of this process so far, every thread's (user + system)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _timed_format_import(source: str, db: str, fmt: str, queue) -> None:
    tokenization = _tokenization_timer()
    cpu, start = _cpu_seconds(), time.perf_counter()
    with Store(db) as store:
        report = import_path(store, source, "bench", fmt=fmt)
    seconds, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
    queue.put((report.records, report.tokens, seconds, tokenization(), _peak_rss_mb(), cpu))


def _timed_store_write(parquet: str, db: str, queue) -> None:
    """The store's share of an import: the native Parquet run's rows, as the importer shapes them, inserted
    into a fresh store 2,048 rollouts a transaction and the store closed (no reading, no checks)."""
    table = pq.read_table(parquet)
    n = table.num_rows
    rows = pa.table(
        {
            "run_id": pa.array(np.ones(n, np.int32)),
            "rollout_id": pa.array(np.arange(n, dtype=np.int32)),
            "group_id": pa.array(np.arange(n, dtype=np.int32) // 8),
            "step": table.column("step").cast(pa.int32()),
            "prompt": table.column("prompt"),
            "response": table.column("response"),
            "token_ids": table.column("token_ids").cast(pa.list_(pa.int32())),
            "logprobs": table.column("logprobs"),
            "entropies": table.column("entropies"),
            "record_key": pa.array(np.arange(n, dtype=np.int64)),
        }
    ).combine_chunks()
    start = time.perf_counter()
    with Store(db) as store:
        for first in range(0, n, 2048):
            with store.transaction():
                store.insert_arrow("rollouts", rows.slice(first, 2048))
    queue.put(time.perf_counter() - start)


def _timed_parse(files: list[str], queue) -> None:
    cpu, start = _cpu_seconds(), time.perf_counter()
    for name in files:
        (pq.read_table if name.endswith(".parquet") else pj.read_json)(name)
    queue.put((time.perf_counter() - start, _cpu_seconds() - cpu))


def _in_child(target, *args):
    ctx = multiprocessing.get_context("spawn")
    queue = ctx.Queue()
    proc = ctx.Process(target=target, args=(*args, queue))
    proc.start()
    result = queue.get()
    proc.join()
    return result


def _files(path: Path) -> list[str]:
    return sorted(str(p) for p in ([path] if path.is_file() else path.rglob("*.*")) if p.suffix != "")


FORMAT_ROWS = {
    "native-jsonl": ("native JSONL", None, "native"),
    "native-parquet": ("native Parquet", None, "native"),
    "nemo-rl": ("NeMo-RL", write_nemo_rl, "nemo-rl"),
    "prime-rl": ("prime-rl", write_prime_rl, "prime-rl"),
    "rl-logging-board": ("RL Logging Board", write_rl_logging_board, "rl-logging-board"),
    "verl": ("verl (text: simple tokenization)", write_verl, "verl"),
}
"""The formats table's rows: --formats names -> (label, writer, import format)."""


def formats_comparison(tmp: Path, tokens: int, repeat: int, names: list[str]) -> None:
    """Each format's import against pyarrow's parse of the same files, each in a process of its own (the
    median of `repeat` of each, run one after the other)."""
    jsonl, parquet = write_native(tmp, tokens)
    one = tmp / "one.jsonl"
    one.write_text(jsonl.open().readline())
    native = {"native-jsonl": jsonl, "native-parquet": parquet}
    sources = [
        (label, native[name] if writer is None else writer(tmp / name, tokens), fmt)
        for name, (label, writer, fmt) in FORMAT_ROWS.items()
        if name in names
    ]

    def median(runs: list, by: int | None = 2):
        """The run of median wall time (item `by` of each run; None: the run is the time)."""
        return sorted(runs, key=lambda run: run if by is None else run[by])[len(runs) // 2]

    fixed = median(
        [
            _in_child(_timed_format_import, str(one), str(tmp / f"one{r}.duckdb"), "native")
            for r in range(repeat)
        ]
    )
    store = median(
        [_in_child(_timed_store_write, str(parquet), str(tmp / f"w{r}.duckdb")) for r in range(repeat)], None
    )
    print(
        f"{'format':<34} {'MB':>6} {'tokens':>10} {'parse s':>8} {'import s':>9} {'tokenize s':>11} "
        f"{'x parse':>8} {'x parse, untokenized':>21} {'x parse, CPU s':>15} {'peak MB':>8}"
    )
    print(f"{'one record (the fixed part)':<34} {'':>6} {'':>10} {'':>8} {fixed[2]:>9.2f}")
    print(f"{'store write of the Parquet rows':<34} {'':>6} {'':>10} {'':>8} {store:>9.2f}")
    for k, (label, path, fmt) in enumerate(sources):
        files = _files(path)
        size = sum(Path(f).stat().st_size for f in files) / 1e6
        parsed = [f for f in files if f.endswith((".jsonl", ".parquet"))]
        parse, parse_cpu = median([_in_child(_timed_parse, parsed) for _ in range(repeat)], 0)
        records, n_tokens, seconds, tokenizing, rss, cpu = median(
            [
                _in_child(_timed_format_import, str(path), str(tmp / f"f{k}-{r}.duckdb"), fmt)
                for r in range(repeat)
            ]
        )
        print(
            f"{label:<34} {size:>6.0f} {n_tokens:>10,} {parse:>8.2f} {seconds:>9.2f} {tokenizing:>11.2f} "
            f"{seconds / parse:>8.1f} {(seconds - tokenizing) / parse:>21.1f} {cpu / parse_cpu:>15.1f} "
            f"{rss:>8,.0f}"
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
    parser.add_argument(
        "--format-tokens",
        type=int,
        default=2_000_000,
        help="tokens of each format's run (0: skip)",
    )
    parser.add_argument("--only-formats", action="store_true", help="only the formats table")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each formats-table row (median)")
    parser.add_argument(
        "--formats", default=",".join(FORMAT_ROWS), help=f"formats-table rows: {','.join(FORMAT_ROWS)}"
    )
    args = parser.parse_args(argv)
    if args.format_tokens:
        with tempfile.TemporaryDirectory() as tmp:
            formats_comparison(Path(tmp), args.format_tokens, args.repeat, args.formats.split(","))
        if args.only_formats:
            return 0
        print()
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
