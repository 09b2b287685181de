"""`creditlens rollouts ...` (the Explorer's table) and `creditlens trends ...` (one row per step).

Both call `backend.views.explorer`, the functions the Explorer and Trends views call, so the numbers match.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from backend.cli.common import add_db_arg, add_set_arg, add_workers_args, parse_overrides, whole_number
from backend.cli.tune import numbers
from backend.core.errors import InputError
from backend.credit import as_trained, main_channel
from backend.store import store_handle
from backend.views import compare_runs, explorer, group_summary, reward_histogram


def add_commands(sub) -> None:
    p = sub.add_parser(
        "rollouts", help="the Explorer's table: one row per rollout, sorted, filtered, searched"
    )
    _common(p)
    p.add_argument(
        "--compare",
        default=None,
        metavar="E2",
        help="second estimator: adds `spearman`, the rank correlation of the two on each rollout",
    )
    p.add_argument(
        "--compare-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="compare_overrides",
        help="parameter of the second estimator, repeatable",
    )
    p.add_argument(
        "--sort",
        default="rollout_id",
        help="column to sort by (NULLs last; default rollout_id); --sort=-COL or --descending sorts "
        "descending",
    )
    p.add_argument("--descending", action="store_true", help="sort descending (default: ascending)")
    p.add_argument(
        "--search", default="", help="case-insensitive text in the prompt or the response (default: none)"
    )
    p.add_argument(
        "--where",
        action="append",
        default=[],
        metavar="'length>=50'",
        help="filter COL OP VALUE as one quoted argument, repeatable, or several joined by commas as "
        "`histogram` prints them: e.g. 'length>=100', 'share_filler>0.5', 'zero_variance=true', "
        "'step=3,reward>=0.2,reward<0.4' (default: none)",
    )
    p.add_argument(
        "--limit", type=whole_number(1), default=None, help="at most this many rows (default: all)"
    )
    p.add_argument("--offset", type=whole_number(0), default=0, help="skip this many rows first (default: 0)")
    p.set_defaults(func=cmd_rollouts)

    p = sub.add_parser("group", help="one group's facts: responses, lengths, each channel's scores over them")
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument("--group", required=True, type=whole_number(0), help="group id (as `rollouts` shows it)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    p.set_defaults(func=cmd_group)

    p = sub.add_parser(
        "histogram",
        help="the reward of each step as a histogram: a row per step and bin with the --where filter "
        "that lists its rollouts (the Trends view's reward bubbles)",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument(
        "--bins",
        type=whole_number(1),
        default=10,
        help=f"equal-width bins over the run's rewards (default 10; at most {reward_histogram.MAX_VALUES} "
        "distinct rewards get a bin each)",
    )
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.set_defaults(func=cmd_histogram)

    p = sub.add_parser("trends", help="one row per step: scores, length, entropy, KL, credit share by class")
    _common(p, several=True)
    p.set_defaults(func=cmd_trends)


def _common(p, several: bool = False) -> None:
    add_db_arg(p)
    if several:
        p.add_argument(
            "--run",
            action="append",
            required=True,
            help="run name; repeat it for several runs: their rows, each with a `run` field",
        )
        p.add_argument(
            "--smooth",
            type=float,
            default=0.0,
            metavar="W",
            help="EMA weight in [0, 1): each run's numbers as their moving average over steps, as the "
            "Trends view's smoothing slider draws them (default 0: none)",
        )
    else:
        p.add_argument("--run", required=True, help="run name")
    p.add_argument(
        "--estimator",
        default=None,
        help="estimator whose credit is summarized (share_<class>, max_abs); default: none",
    )
    add_set_arg(p)
    add_workers_args(p, "the estimator's chunks when its output is not in the store yet")
    p.add_argument(
        "--channel",
        default=None,
        help="reward channel the estimators read (default: the run's main channel); 'all': the "
        "channel scores summed per rollout",
    )
    p.add_argument(
        "--credit",
        choices=explorer.CREDITS,
        default="final",
        help="what the share_/excess_ columns describe: final (default), A_final = Σ_c β_c·Ã_c as the "
        "Rollout view colours it; channel: the estimator's output on --channel alone",
    )
    p.add_argument(
        "--beta",
        action="append",
        default=[],
        metavar="CHANNEL=VALUE",
        help="β of a channel in A_final, repeatable (default: the run's; the app's tuned β, ?tuned=)",
    )
    out = p.add_mutually_exclusive_group(required=True)
    out.add_argument("--json", action="store_true", help="print the rows as a JSON list of objects")
    out.add_argument("--out", type=Path, default=None, help="write the rows to this .parquet file")


def _config(handle, args, estimator: str | None, pairs: list[str]) -> tuple:
    """The estimator's `--set` pairs on `--channel` (checked against the run's channels; default: the
    run's main channel)."""
    if estimator is None:
        return tuple(sorted(parse_overrides(pairs).items()))
    return main_channel.config_on_channel(handle, args.run, estimator, parse_overrides(pairs), args.channel)


def _betas(args) -> tuple:
    """`--beta C=X ...` as sorted (channel, β) pairs, each β ≥ 0 (an InputError names the bad one)."""
    betas = numbers(args.beta, "--beta")
    for channel, beta in betas.items():
        if beta < 0:
            raise InputError(f"--beta {channel}={beta:g}: β is ≥ 0")
    return tuple(sorted(betas.items()))


def _emit(frame: pd.DataFrame, args) -> None:
    if args.json:
        sys.stdout.write(frame.to_json(orient="records", double_precision=15))
        sys.stdout.write("\n")
        return
    out: Path = args.out
    if out.suffix != ".parquet":
        raise InputError(f"{out}: the output must be a .parquet file")
    if not out.parent.exists():
        raise InputError(f"{out}: directory {out.parent} does not exist")
    fd, tmp = tempfile.mkstemp(suffix=".parquet.tmp", dir=out.parent)
    os.close(fd)
    try:  # written beside the target and renamed: a failure never leaves half a file
        pq.write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp)
        os.replace(tmp, out)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def cmd_rollouts(args) -> int:
    sort, descending = args.sort, args.descending
    if sort.startswith("-"):
        sort, descending = sort[1:], True
    handle = store_handle(args.db)
    args.estimator = as_trained.chosen_estimator(handle, args.run, args.estimator, fallback=None)
    query = explorer.ExplorerQuery(
        estimator=args.estimator,
        config=_config(handle, args, args.estimator, args.overrides),
        compare=args.compare,
        compare_config=_config(handle, args, args.compare, args.compare_overrides),
        sort=sort,
        descending=descending,
        search=args.search,
        filters=explorer.parse_filters(args.where),
        limit=args.limit,
        offset=args.offset,
        credit=args.credit,
        betas=_betas(args),
    )
    page = explorer.rollout_table(handle, args.run, query)
    if args.estimator is not None:
        credit = as_trained.credit_note(args.estimator, as_trained.run_recipe(handle, args.run))
        if credit:
            print(f"credit: {credit}", file=sys.stderr)
    for note in page.notes:
        print(f"note: {note}", file=sys.stderr)
    _emit(page.rows, args)
    matched = "" if page.in_run is None else f" that match, of {page.in_run} in the run"
    print(
        f"{len(page.rows)} of {page.total} rollouts{matched}"
        + (f" written to {args.out}" if args.out else ""),
        file=sys.stderr,
    )
    return 0


def cmd_histogram(args) -> int:
    frame = reward_histogram.reward_histogram(store_handle(args.db), args.run, args.bins)
    if args.json:
        sys.stdout.write(frame.to_json(orient="records", double_precision=15) + "\n")
        return 0
    print(f"{'step':>5} {'reward':<22} {'rollouts':>8}  where")
    for row in frame.itertuples():
        print(f"{row.step:>5} {row.label:<22} {row.rollouts:>8}  {row.where}")
    return 0


def cmd_group(args) -> int:
    summary = group_summary.group_summary(store_handle(args.db), args.run, args.group)
    if args.json:
        sys.stdout.write(json.dumps(summary.as_dict()) + "\n")
        return 0
    print(
        f"group {summary.group} · steps {', '.join(map(str, summary.steps))} · "
        f"{summary.rollouts} responses · length {summary.length_min}–{summary.length_max} "
        f"(mean {summary.length_mean:.1f})" + (" · zero variance" if summary.zero_variance else "")
    )
    for c in summary.channels:
        if c.mean is None:
            print(f"  {c.channel}: no scores")
        else:
            print(
                f"  {c.channel}: mean {c.mean:+.3f}, min {c.min:+.3f}, max {c.max:+.3f} "
                f"({c.distinct} distinct)"
            )
    return 0


def cmd_trends(args) -> int:
    if not 0 <= args.smooth < 1:  # before anything is computed
        raise InputError(f"--smooth {args.smooth:g}: an EMA weight in [0, 1) (0: none, 0.9: heavy)")
    handle = store_handle(args.db)
    args.estimator = as_trained.chosen_estimator(handle, args.run, args.estimator, fallback=None)
    if len(args.run) > 1:  # each run's rows are its own single-run command's (backend/views/compare_runs.py)
        if args.beta:
            raise InputError("--beta: a tuned β belongs to one run; give one --run with it")
        overrides = parse_overrides(args.overrides)
        frame = compare_runs.run_trends(
            handle, args.run, args.estimator, overrides, args.channel, credit=args.credit
        )
        _emit(compare_runs.smooth(frame, args.smooth), args)
        print(
            f"{len(frame)} steps of {len(args.run)} runs" + (f" written to {args.out}" if args.out else ""),
            file=sys.stderr,
        )
        return 0
    args.run = args.run[0]
    frame = explorer.step_trends(
        handle,
        args.run,
        args.estimator,
        _config(handle, args, args.estimator, args.overrides),
        credit=args.credit,
        betas=_betas(args),
    )
    _emit(compare_runs.smooth(frame, args.smooth), args)
    print(f"{len(frame)} steps" + (f" written to {args.out}" if args.out else ""), file=sys.stderr)
    return 0
