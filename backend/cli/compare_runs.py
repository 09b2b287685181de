"""`creditlens compare-runs --run A --run B ...`: one row per run (`backend.monitor.compare_runs`, the
function `creditlens.open().compare([...])` and the Runs comparison view call): size, scores, credit shares
by token class at the first and last step, entropy/KL/length at the last step, the monitors' earliest warning
and the configuration keys that differ."""

from __future__ import annotations

import sys

import pandas as pd

from backend.cli.common import ESTIMATOR_DEFAULT, add_db_arg, parse_overrides
from backend.credit import as_trained
from backend.store import store_handle


def add_commands(sub) -> None:
    p = sub.add_parser(
        "compare-runs",
        help="runs side by side: one row per run with scores, credit shares by class, the monitors' "
        "earliest warning and the configuration keys that differ",
    )
    add_db_arg(p)
    p.add_argument(
        "--run", action="append", required=True, help="run name; repeat for each run (in the order wanted)"
    )
    p.add_argument(
        "--estimator",
        default=None,
        help="estimator whose credit shares and monitors are given; " + ESTIMATOR_DEFAULT,
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="overrides",
        help="estimator parameter, repeatable",
    )
    p.add_argument(
        "--channel",
        default=None,
        help="reward channel the estimator reads on every run (default: each run's own main channel)",
    )
    p.add_argument(
        "--alerts",
        action="store_true",
        help="print every warning the monitors raise on each run instead (run, step, severity, detector, "
        "statistic): the marks on the Trends view's run traces",
    )
    p.add_argument(
        "--same-prompt",
        action="store_true",
        help="print the groups the runs were asked the same prompt in instead (prompt, run, step, group_id, "
        "responses; prompts that two or more of the runs were asked): what the Compare view shows side by "
        "side",
    )
    p.add_argument("--prompt", default=None, help="with --same-prompt: only this prompt (its exact text)")
    p.add_argument("--step", type=int, default=None, help="with --same-prompt: only this step")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list of objects")
    p.set_defaults(func=cmd_compare_runs)


def cmd_compare_runs(args) -> int:
    from backend.monitor import compare_runs  # noqa: PLC0415 - heavy (torch, estimators); see backend/cli/__init__.py

    handle = store_handle(args.db)
    if args.same_prompt:
        from backend.views.compare_runs import same_prompt  # noqa: PLC0415 - as the import above

        found = same_prompt(handle, args.run, args.prompt, args.step)
        _print_rows(found, args.json, "no prompt is shared by two of these runs")
        print(f"{found['prompt'].nunique()} prompts shared, {len(found)} groups", file=sys.stderr)
        return 0
    if args.prompt is not None or args.step is not None:
        print("creditlens compare-runs: --prompt and --step go with --same-prompt", file=sys.stderr)
        return 2
    overrides = parse_overrides(args.overrides)
    args.estimator = as_trained.chosen_estimator(handle, args.run, args.estimator)
    if args.alerts:
        found = compare_runs.run_alerts(handle, args.run, args.estimator, overrides, args.channel)
        _print_rows(found, args.json, "no warnings on these runs")
        print(f"{len(found)} warnings on {len(args.run)} runs ({args.estimator})", file=sys.stderr)
        return 0
    frame = compare_runs.compare_runs(handle, args.run, args.estimator, overrides, args.channel)
    if args.json:
        sys.stdout.write(frame.to_json(orient="records", double_precision=15))
        sys.stdout.write("\n")
    else:
        print(as_text(frame))
    print(f"{len(frame)} runs compared ({args.estimator})", file=sys.stderr)
    return 0


def _print_rows(frame: pd.DataFrame, as_json: bool, when_empty: str) -> None:
    """A table of rows (--alerts, --same-prompt): JSON records, or a plain table (`when_empty` for none)."""
    if as_json:
        sys.stdout.write(frame.to_json(orient="records") + "\n")
    else:
        print(frame.to_string(index=False) if len(frame) else when_empty)


def as_text(frame: pd.DataFrame) -> str:
    """The rows as a table with a column per run (rows are wide, runs are few); the full configuration is
    left out (the `config.<key>` rows show the keys that differ; --json has it all)."""
    shown = frame.drop(columns=["config"]).set_index("run").T
    shown.columns.name = None  # the header line is the runs' names alone
    return shown.map(lambda v: "-" if v is None or v is pd.NA or v != v else v).to_string()
