"""`python -m bench scale [--tokens N] [--small-tokens N] [--chunk R] [--text] [--imports-only |
--streamed-only] [--mean-len L] [--workers N [--ray local:N] [--baseline DIR] [--scaling-only]]`: whole-run
speed, peak memory and the I/O floor; with `--workers`, how imports and estimates scale over workers, on Ray,
and against another checkout (bench/scale_workers.py).

Measured in one run, each row in its own process (peak RSS from `os.wait4`, so it is that process's own):
- imports of one synthetic run of `--tokens` tokens (ragged lengths, groups of 8, 64 groups per step,
  token ids, logprobs, entropies and critic values, two reward channels) from native Parquet and from
  the same records as native JSONL;
- `creditlens estimate --no-cache` end to end (process start, reading the store, the estimator, the
  cache and the Parquet output) for grpo, gae (stored and fitted values), entropy, prefix_tree, token_rm
  and rudder: the in-memory path (`--chunk none`, the baseline) against the streamed one (`--chunk R`),
  and streamed again on a second run of `--small-tokens` (default 2M: the runs people open most; peak
  memory should not move); `--streamed-only` skips the in-memory rows (ratios are then against the
  streamed grpo row of the same run); `--text` gives every token a text (token classes by regex, text
  in the output), as real runs have;
- the fixed cost: the same command on a one-group run, and the import of torch and the estimators in a
  new process (part of every estimate's time after start);
- the I/O floor of each streamed row, in this process: a DuckDB scan of the columns the estimate reads
  and a Parquet write of the rows it wrote, with the command's schema and settings.
CI never runs this; docs/benchmarks.md has a table it printed and the load average then.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from backend.core.chunks import DEFAULT_CHUNK_ROLLOUTS
from bench.children import line, run_child

ROWS = (
    ("grpo", []),
    ("gae (stored values)", ["--set", "value_source=stored"]),
    ("gae (fitted values)", []),
    ("entropy", []),
    ("prefix_tree", []),
    ("token_rm", []),
    ("rudder", []),
)


VOCABULARY = np.array(
    [
        " the",
        " of",
        " and",
        " to",
        "\n",
        ".",
        ",",
        " 12",
        "7",
        " carry",
        " =",
        " +",
        "  ",
        " Let",
        " me",
        " think",
        "####",
        " 3",
        " answer",
        " is",
    ],
    dtype=object,
)
"""Token text of a `--text` run: words, digits, punctuation, white space and line ends, so every default
token class occurs."""


def write_run(
    parquet: Path,
    jsonl: Path | None,
    total_tokens: int,
    seed: int = 0,
    mean_len: int = 512,
    group: int = 8,
    text: bool = False,
) -> int:
    """One native run as Parquet (and, when `jsonl` is given, as JSONL with the same records); `text`:
    with token text (`tokens`), drawn from `VOCABULARY` by token id."""
    rng = np.random.default_rng(seed)
    writer, written, rollout = None, 0, 0
    lines = open(jsonl, "w") if jsonl is not None else None  # closed in the finally
    try:
        while written < total_tokens:  # blocks of up to 1024 rollouts, whole groups, about the tokens asked
            n = min(1024, group * -(-(total_tokens - written) // (mean_len * group)))
            lengths = rng.integers(mean_len // 4, mean_len * 7 // 4, size=n)
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
            count = int(offsets[-1])
            columns = {
                "token_ids": rng.integers(0, 50_000, size=count, dtype=np.int32),
                "logprobs": -rng.exponential(1.0, size=count).astype(np.float32),
                "entropies": rng.exponential(1.0, size=count).astype(np.float32),
                "values": rng.random(count).astype(np.float32),
            }
            if text:
                columns["tokens"] = VOCABULARY[columns["token_ids"] % len(VOCABULARY)]
            ids = rollout + np.arange(n)
            task = rng.integers(0, 2, size=n).astype(np.float64)
            style = -rng.integers(0, 2, size=n).astype(np.float64)
            table = pa.table(
                {
                    "prompt": [f"prompt {i // group}" for i in ids],
                    "response": ["..."] * n,
                    "step": pa.array((ids // (group * 64)).astype(np.int64)),
                    **{
                        name: pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
                        for name, values in columns.items()
                    },
                    "rewards": pa.StructArray.from_arrays(
                        [pa.array(task), pa.array(style)], names=["task", "style"]
                    ),
                }
            )
            if writer is None:
                writer = pq.ParquetWriter(parquet, table.schema)
            writer.write_table(table)
            if lines is not None:
                for record in table.to_pylist():
                    lines.write(json.dumps(record) + "\n")
            written += count
            rollout += n
    finally:
        if writer is not None:
            writer.close()
        if lines is not None:
            lines.close()
    return written


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    wanted = set(args.estimators.split(","))
    load = " ".join(f"{x:.1f}" for x in os.getloadavg())
    print(
        f"load average {load} on {os.cpu_count()} CPUs; tokens/s and ratios use the time after process "
        "start (the wall column includes it)"
    )
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        source, text = tmp / "run.parquet", tmp / "run.jsonl"
        total = write_run(source, None, args.tokens, text=args.text, mean_len=args.mean_len)
        if args.workers:
            from bench.scale_workers import scaling_rows  # noqa: PLC0415 - only with --workers

            label = f", {args.mean_len}-token rollouts" if args.mean_len != 512 else ""
            scaling_rows(source, total, tmp, args.workers, args.ray, args.baseline, wanted, label)
            if args.scaling_only:
                return 0
        jsonl_total = write_run(tmp / "j.parquet", text, args.jsonl_tokens, 2) if args.jsonl_tokens else 0
        print(
            f"{'row':<54} {'tokens':>11} {'wall s':>7} {'s':>7} {'cpu s':>6} {'tokens/s':>11} {'ratio':>6} "
            f"{'peak MB':>8}"
        )
        db = tmp / "store.duckdb"
        wall, inner, cpu, rss = run_child(["import", str(source), "--db", str(db), "--run", "big"])
        parquet_rate = total / inner
        line("import native Parquet", total, wall, inner, cpu, rss, parquet_rate)
        if jsonl_total:
            wall, inner, cpu, rss = run_child(
                ["import", str(text), "--db", str(tmp / "j.duckdb"), "--run", "j"]
            )
            line(
                "import native JSONL (ratio: against Parquet)",
                jsonl_total,
                wall,
                inner,
                cpu,
                rss,
                parquet_rate,
            )
        if args.imports_only:
            print(f"load average after: {os.getloadavg()[0]:.1f}")
            return 0
        runs = [Run("big", total, db, "")]
        if args.small_tokens:
            small = tmp / "small.parquet"
            small_total = write_run(small, None, args.small_tokens, seed=1, text=args.text)
            runs.append(Run("small", small_total, tmp / "small.duckdb", f", {_short(small_total)}-token run"))
            run_child(["import", str(small), "--db", str(runs[-1].db), "--run", "small"])
        one_group = tmp / "one_group.parquet"
        write_run(one_group, None, 1, seed=2, text=args.text)  # 8 rollouts: the fixed cost of a command
        run_child(["import", str(one_group), "--db", str(tmp / "one.duckdb"), "--run", "one"])
        estimated = _estimate_rows(args, wanted, runs, tmp)
        wall, fixed, cpu, rss = run_child(
            ["estimate", "--db", str(tmp / "one.duckdb"), "--run", "one", "--estimator", "grpo"]
            + ["--no-cache", "--out", str(tmp / "one.parquet")]
        )
        line("estimate grpo, one group (the fixed cost)", 8, wall, fixed, cpu, rss, None)
        print(f"import of torch and the estimators in a new process: {_import_seconds():.2f} s")
        _print_floor(estimated, fixed)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


@dataclass(frozen=True)
class Run:
    """A stored run the estimate rows read: its name in `db`, its tokens, and a label suffix."""

    name: str
    tokens: int
    db: Path
    label: str


@dataclass(frozen=True)
class Estimated:
    """A streamed estimate row: what the I/O floor is measured against (its store, its output file)."""

    estimator: str
    extra: list[str]
    run: Run
    seconds: float
    out: Path


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench scale")
    parser.add_argument("--tokens", type=int, default=10_000_000)
    parser.add_argument(
        "--small-tokens",
        type=int,
        default=2_000_000,
        help="tokens of the second, small run every estimate row also runs on (0: skip)",
    )
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK_ROLLOUTS, help="rollouts per chunk")
    parser.add_argument("--mean-len", type=int, default=512, help="mean response length of the runs")
    parser.add_argument(
        "--workers",
        type=int,
        default=0,
        help="N: add the scaling rows (bench/scale_workers.py): import and grpo/gae with 1 and N workers, "
        "the default, --ray and --baseline, on the --tokens run (0: none)",
    )
    parser.add_argument("--ray", default=None, help="with --workers: a row on this Ray address (local:N)")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=None,
        help="with --workers: rows run by another checkout (e.g. a git worktree of an older commit)",
    )
    parser.add_argument("--scaling-only", action="store_true", help="with --workers: only the scaling rows")
    parser.add_argument(
        "--jsonl-tokens",
        type=int,
        default=1_000_000,
        help="tokens of the JSONL import row (0: skip; JSONL is written by python)",
    )
    parser.add_argument(
        "--estimators",
        default=",".join(name for name, _ in ROWS),
        help="comma-separated row names to run (default: all)",
    )
    parser.add_argument(
        "--text",
        action="store_true",
        help="the run has token text (token classes by regex, text in the output)",
    )
    parser.add_argument(
        "--streamed-only",
        action="store_true",
        help="skip the in-memory rows (a 100M-token run does not fit in memory that way)",
    )
    parser.add_argument(
        "--imports-only",
        action="store_true",
        help="only the import rows (Parquet and JSONL); --jsonl-tokens defaults to --tokens",
    )
    args = parser.parse_args(argv)
    if args.imports_only and "--jsonl-tokens" not in (argv if argv is not None else sys.argv[1:]):
        args.jsonl_tokens = args.tokens
    return args


def _estimate_rows(args: argparse.Namespace, wanted: set[str], runs: list[Run], tmp: Path) -> list[Estimated]:
    """`creditlens estimate` of each wanted row of ROWS over each run: in memory (on the first run, unless
    --streamed-only) and streamed in chunks; a streamed row's ratio is against its in-memory time, or
    under --streamed-only against the first streamed row's on that run. Returns the streamed rows."""
    first_rate: dict[str, float] = {}
    done = []
    for name, extra in ROWS:
        if name not in wanted:
            continue
        for run in runs:
            out = tmp / f"out-{len(done)}.parquet"
            command = ["estimate", "--db", str(run.db), "--run", run.name, "--estimator", name.split()[0]]
            command += [*extra, "--no-cache", "--out", str(out)]
            base = None
            if not args.streamed_only and run is runs[0]:
                wall, inner, cpu, rss = run_child([*command, "--chunk", "none"])
                base = run.tokens / inner
                line(f"estimate {name}, in memory{run.label}", run.tokens, wall, inner, cpu, rss, base)
            wall, inner, cpu, rss = run_child([*command, "--chunk", str(args.chunk)])
            first_rate.setdefault(run.name, run.tokens / inner)
            line(
                f"estimate {name}, streamed{run.label}",
                run.tokens,
                wall,
                inner,
                cpu,
                rss,
                base or first_rate[run.name],
            )
            done.append(Estimated(name, extra, run, inner, out))
    return done


def _import_seconds() -> float:
    """Seconds a new process takes to import torch and the estimators (what `creditlens estimate` imports
    after the command line is parsed), measured in a child."""
    code = (
        "import time\nimport backend.cli.main\nstart = time.perf_counter()\n"
        "import backend.credit.token_rows\nprint(time.perf_counter() - start)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def _print_floor(estimated: list[Estimated], fixed: float) -> None:
    """The I/O floor of each streamed row, measured here in this process: a DuckDB scan of the columns the
    estimate reads (its run's rollouts and scores, `Batches.scan_rollouts`) and a Parquet write of the rows
    it wrote (read back into memory first; the command's schema and writer settings). `fixed`: the seconds
    of the one-group estimate, taken off the row's time in the last column."""
    from backend.credit.estimates import stream_fields  # noqa: PLC0415 - torch: the estimate rows ran first
    from backend.credit.token_rows import (  # noqa: PLC0415 - idem
        DICTIONARY_COLUMNS,
        TOKEN_ROWS_SCHEMA,
        estimate_config,
    )
    from backend.store import store_handle  # noqa: PLC0415 - idem

    if not estimated:
        return
    print(
        "\nI/O floor, measured in this run: a DuckDB scan of the columns the estimate reads, and a Parquet "
        "write of the rows it wrote (same schema and settings); 'of floor': the estimate's tokens/s "
        "against scan + write; 'less fixed': the same, the one-group estimate's seconds taken off first"
    )
    print(
        f"{'estimator':<32} {'tokens':>11} {'scan s':>7} {'write s':>8} {'floor tok/s':>12} "
        f"{'estimate tok/s':>15} {'of floor':>9} {'less fixed':>11}"
    )
    for row in estimated:
        handle = store_handle(row.run.db)
        overrides = dict(pair.split("=", 1) for pair in row.extra[1::2])
        name, config = estimate_config(handle, row.run.name, row.estimator.split()[0], overrides)
        fields = stream_fields(name, config, save=True, with_tokens=True)
        with handle.read() as store:
            start = time.perf_counter()
            store.scan_rollouts(row.run.name, fields)
            scan = time.perf_counter() - start
        table = pq.read_table(row.out)
        start = time.perf_counter()
        with pq.ParquetWriter(
            row.out.with_suffix(".floor"), TOKEN_ROWS_SCHEMA, use_dictionary=DICTIONARY_COLUMNS
        ) as writer:
            writer.write_table(table)
        write = time.perf_counter() - start
        floor, rate = row.run.tokens / (scan + write), row.run.tokens / row.seconds
        variable = (scan + write) / (row.seconds - fixed) if row.seconds > fixed else float("nan")
        print(
            f"{row.estimator + row.run.label:<32} {row.run.tokens:>11,} {scan:>7.2f} {write:>8.2f} "
            f"{floor:>12,.0f} {rate:>15,.0f} {rate / floor:>9.2f} {variable:>11.2f}"
        )


def _short(tokens: int) -> str:
    return f"{tokens / 1e6:.0f}M" if tokens >= 1_000_000 else f"{tokens:,}"


if __name__ == "__main__":
    raise SystemExit(main())
