"""`python -m bench oracle [--seeds N --prompts P --group G] [--json FILE]`: the oracle credit table.

Runs `backend.evaluation.oracle.oracle_bench` at the reference size (20 seeds x 500 prompts x 8 responses) by
default and prints the table, the slowest estimators and the wall time (budget: under 2 minutes on
two cores).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from backend.evaluation.oracle import default_workers, format_table, jsonable_rows, oracle_bench
from backend.evaluation.synthetic import OracleConfig, generate, to_batch


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench oracle")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=500)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--workers", type=int, default=default_workers())
    args = parser.parse_args(argv or [])

    torch.set_num_threads(1)
    start = time.perf_counter()
    seed_size = to_batch(generate(0, OracleConfig(prompts=args.prompts, group=args.group))).B
    print(f"generating one seed ({seed_size} responses): {time.perf_counter() - start:.2f} s")
    start = time.perf_counter()
    rows = oracle_bench(args.seeds, args.prompts, args.group, progress=print, workers=args.workers)
    wall = time.perf_counter() - start
    print(format_table(rows))
    per_estimator: dict[str, float] = {}
    for row in rows:
        per_estimator[row["estimator"]] = per_estimator.get(row["estimator"], 0.0) + row["seconds"]
    slowest = sorted(per_estimator.items(), key=lambda kv: -kv[1])[:5]
    print(
        "slowest estimators (seconds summed over seeds and pipelines): "
        + ", ".join(f"{name} {seconds:.1f} s" for name, seconds in slowest)
    )
    print(
        f"{args.seeds} seeds x {args.prompts} prompts x {args.group} responses: wall time {wall:.1f} s "
        f"({'within' if wall < 120 else 'OVER'} the 120 s budget)"
    )
    if args.json is not None:
        payload = {"wall_seconds": round(wall, 2), "rows": jsonable_rows(rows)}
        args.json.write_text(json.dumps(payload, indent=1))
    return 0
