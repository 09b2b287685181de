"""`python -m bench scale [--tokens N] [--chunk R] [--text] [--imports-only | --streamed-only]`: whole-run
speed and peak memory.

Measured in one run, each row in its own process (peak RSS from `os.wait4`, so it is that process's own):
- imports of one synthetic run of `--tokens` tokens (ragged lengths, groups of 8, 64 groups per step,
  token ids, logprobs, entropies and critic values, two reward channels) from native Parquet and from
  the same records as native JSONL;
- `creditlens estimate --no-cache` end to end (process start, reading the store, the estimator, the
  cache and the Parquet output) for grpo, gae (stored and fitted values), entropy, prefix_tree, token_rm
  and rudder: the in-memory path (`--chunk none`, today's baseline) against the streamed one
  (`--chunk R`), and the streamed grpo again on a run a tenth the size (peak memory should not move);
  `--streamed-only` skips the in-memory rows (ratios are then against the streamed grpo row); `--text`
  gives every token a text (token classes by regex, text in the output), as real runs have.
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
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from backend.core.chunks import DEFAULT_CHUNK_ROLLOUTS

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
    text = open(jsonl, "w") if jsonl is not None else None
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
            if text is not None:
                for record in table.to_pylist():
                    text.write(json.dumps(record) + "\n")
            written += count
            rollout += n
    finally:
        if writer is not None:
            writer.close()
        if text is not None:
            text.close()
    return written


RUNNER = (
    "import sys, time\nfrom backend.cli import main\nstart = time.perf_counter()\n"
    "code = main(sys.argv[1:])\nprint(f'__seconds__ {time.perf_counter() - start}')\nsys.exit(code)"
)


def run_child(args: list[str]) -> tuple[float, float, float]:
    """(wall seconds, seconds after process start, peak RSS MB) of one `creditlens` command in its own
    process (RSS from wait4: that process's own peak; it includes python and torch, ~0.4 GB)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile("w+") as errors:  # a file, not a pipe: stderr can outgrow a pipe's buffer
        proc = subprocess.Popen(
            [sys.executable, "-c", RUNNER, *args], stdout=subprocess.PIPE, stderr=errors, text=True
        )
        out = proc.stdout.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        errors.seek(0)
        err = errors.read()
    if os.waitstatus_to_exitcode(status):
        raise RuntimeError(f"creditlens {' '.join(args)} failed: {err.strip().splitlines()[-1:]}")
    inner = float(out.strip().splitlines()[-1].split()[-1])
    return wall, inner, usage.ru_maxrss / 1024


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
        total = write_run(source, None, args.tokens, text=args.text)
        jsonl_total = write_run(tmp / "j.parquet", text, args.jsonl_tokens, 2) if args.jsonl_tokens else 0
        small = tmp / "small.parquet"
        small_total = (
            0
            if args.imports_only
            else write_run(small, None, max(args.tokens // 10, 1), seed=1, text=args.text)
        )
        db, db_small = tmp / "store.duckdb", tmp / "small.duckdb"
        print(
            f"{'row':<46} {'tokens':>11} {'wall s':>7} {'s':>7} {'tokens/s':>11} {'ratio':>6} {'peak MB':>8}"
        )
        wall, inner, rss = run_child(["import", str(source), "--db", str(db), "--run", "big"])
        parquet_rate = total / inner
        _line("import native Parquet", total, wall, inner, rss, parquet_rate)
        if jsonl_total:
            wall, inner, rss = run_child(["import", str(text), "--db", str(tmp / "j.duckdb"), "--run", "j"])
            _line("import native JSONL (ratio: against Parquet)", jsonl_total, wall, inner, rss, parquet_rate)
        if args.imports_only:
            print(f"load average after: {os.getloadavg()[0]:.1f}")
            return 0
        run_child(["import", str(small), "--db", str(db_small), "--run", "small"])
        out = tmp / "out.parquet"
        _estimate_rows(args, wanted, db, out, total)
        if "grpo" in wanted:
            small_run = ["--db", str(db_small), "--run", "small", "--estimator", "grpo"]
            wall, inner, rss = run_child(
                ["estimate", *small_run, "--no-cache", "--out", str(out), "--chunk", str(args.chunk)]
            )
            _line("estimate grpo, streamed, a run a tenth the size", small_total, wall, inner, rss, None)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    return 0


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench scale")
    parser.add_argument("--tokens", type=int, default=10_000_000)
    parser.add_argument("--chunk", type=int, default=DEFAULT_CHUNK_ROLLOUTS, help="rollouts per chunk")
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


def _line(label: str, tokens: int, wall: float, inner: float, rss: float, base: float | None) -> None:
    """One row of the table; the ratio is tokens/s against `base` (none without one)."""
    rate = tokens / inner
    ratio = f"{rate / base:>6.2f}" if base else f"{'':>6}"
    print(f"{label:<46} {tokens:>11,} {wall:>7.1f} {inner:>7.1f} {rate:>11,.0f} {ratio} {rss:>8,.0f}")


def _estimate_rows(args: argparse.Namespace, wanted: set[str], db: Path, out: Path, total: int) -> None:
    """`creditlens estimate` of each wanted row of ROWS over the big run: in memory (unless
    --streamed-only) and streamed in chunks; a streamed row's ratio is against its in-memory time, or
    under --streamed-only against the first streamed row's."""
    grpo_rate = None
    for name, extra in ROWS:
        if name not in wanted:
            continue
        command = [
            "estimate",
            "--db",
            str(db),
            "--run",
            "big",
            "--estimator",
            name.split()[0],
            *extra,
            "--no-cache",
            "--out",
            str(out),
        ]
        base = None
        if not args.streamed_only:
            wall, inner, rss = run_child([*command, "--chunk", "none"])
            base = total / inner
            _line(f"estimate {name}, in memory", total, wall, inner, rss, base)
        wall, inner, rss = run_child([*command, "--chunk", str(args.chunk)])
        if base is None and grpo_rate is None:
            grpo_rate = total / inner
        _line(f"estimate {name}, streamed", total, wall, inner, rss, base or grpo_rate)


if __name__ == "__main__":
    raise SystemExit(main())
