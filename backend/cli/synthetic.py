"""`creditlens synth` (store an oracle run) and `creditlens oracle-bench` (the credit-quality table)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from backend.cli.common import add_db_arg
from backend.core.errors import InputError
from backend.ingest import import_batches
from backend.store import open_store


def _add_size_args(parser) -> None:
    parser.add_argument("--seeds", type=int, default=20, help="independent seeds (default 20)")
    parser.add_argument("--prompts", type=int, default=500, help="prompts per seed (default 500)")
    parser.add_argument("--group", type=int, default=8, help="responses per prompt (default 8)")


def _check_sizes(args) -> None:
    for name in ("seeds", "prompts", "group"):
        value = getattr(args, name)
        if not 1 <= value <= 100_000:
            raise InputError(f"--{name}: must be between 1 and 100000, got {value}")


def cmd_synth(args) -> int:
    from backend.evaluation.synthetic import native_batches  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py

    _check_sizes(args)
    batches = native_batches(seeds=args.seeds, prompts=args.prompts, group=args.group)
    key = f"synthetic-oracle:seeds={args.seeds}:prompts={args.prompts}:group={args.group}"
    # A synthetic run is an import: it may create the store. Arrow batches straight from the arrays: no JSON,
    # no python rows.
    with open_store(args.db, create=True) as store:
        report = import_batches(
            store, args.run, batches, source="synthetic", origin="synthetic oracle", content_key=key
        )
    print(report.message())
    return 0


def cmd_oracle_bench(args) -> int:
    import torch  # noqa: PLC0415 - heavy; see backend/cli/__init__.py

    from backend.estimators.registry import UnknownEstimator, make_config  # noqa: PLC0415 - idem
    from backend.evaluation.oracle import (  # noqa: PLC0415 - idem
        bench_estimators,
        bench_spec,
        default_workers,
        format_table,
        jsonable_rows,
        oracle_bench,
    )

    _check_sizes(args)
    estimators = [e.strip() for e in args.estimators.split(",") if e.strip()] if args.estimators else None
    if args.variant:
        estimators = (estimators if estimators is not None else bench_estimators()) + list(args.variant)
    if estimators is not None:
        for label in estimators:
            try:
                name, overrides = bench_spec(label)
                make_config(name, **overrides)
            except UnknownEstimator as exc:
                raise InputError(f"--estimators: {exc}") from None
            except (ValueError, TypeError) as exc:
                raise InputError(f"--variant {label!r}: {exc}") from None
    if args.json is not None and not args.json.parent.exists():
        raise InputError(f"--json {args.json}: directory {args.json.parent} does not exist")
    start = time.perf_counter()

    def progress(message: str) -> None:
        if not args.quiet or "skipped" in message:  # a skipped estimator is always worth a line
            print(message, file=sys.stderr, flush=True)

    # The parser leaves the default to the bench (its module imports torch).
    workers = default_workers() if args.workers is None else args.workers
    if workers < 1:
        raise InputError(f"--workers: must be at least 1, got {workers}")
    torch.set_num_threads(1)  # seeds run in parallel processes instead; see oracle_bench
    rows = oracle_bench(
        args.seeds, args.prompts, args.group, estimators=estimators, progress=progress, workers=workers
    )
    wall = time.perf_counter() - start
    print(format_table(rows))
    print(f"\n{args.seeds} seeds x {args.prompts} prompts x {args.group} responses; wall time {wall:.1f} s")
    if args.json is not None:
        payload = {
            "seeds": args.seeds,
            "prompts": args.prompts,
            "group": args.group,
            "wall_seconds": round(wall, 2),
            "rows": jsonable_rows(rows),
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 0


def add_commands(sub) -> None:
    p = sub.add_parser("synth", help="store a synthetic oracle run (known token credit)")
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    _add_size_args(p)
    p.set_defaults(func=cmd_synth)

    p = sub.add_parser(
        "oracle-bench", help="credit-quality metrics of every model-free estimator on the oracle"
    )
    _add_size_args(p)
    p.add_argument("--json", type=Path, default=None, help="also write the rows as JSON to FILE")
    p.add_argument("--estimators", default=None, help="comma-separated subset (default: all model-free)")
    p.add_argument(
        "--variant",
        action="append",
        default=None,
        help="an extra row with options, name:key=value,key=value (repeatable), e.g. "
        "gae:lam_mode=length_adaptive",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=None,
        help="processes running seeds in parallel (default: min(2, CPUs))",
    )
    p.add_argument("--quiet", action="store_true", help="no per-seed progress on stderr")
    p.set_defaults(func=cmd_oracle_bench)
