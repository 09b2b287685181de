"""`creditlens turns --run R [--group G]`: an agent run turn by turn (`backend.views.turns`, what the Trends
view's "credit share by turn" chart and the Group view's aligned turns show, and what
`creditlens.open().run(R).turns(...)` returns): per step and assistant turn index the share of |A_final|,
or with --group each response's turns in order with their role, span, trained flag and credit."""

from __future__ import annotations

import sys

from backend.cli.common import ESTIMATOR_DEFAULT, add_db_arg, add_set_arg, parse_overrides
from backend.credit import as_trained
from backend.store import store_handle


def add_commands(sub) -> None:
    p = sub.add_parser(
        "turns",
        help="an agent run by turn: each assistant turn index's share of the final credit per step, or "
        "(--group) each response of a group turn by turn",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument(
        "--estimator", default=None, help="estimator on the run's main channel; " + ESTIMATOR_DEFAULT
    )
    add_set_arg(p)
    p.add_argument("--channel", default=None, help="reward channel the estimator reads (default: main)")
    p.add_argument("--group", type=int, default=None, help="one group's responses turn by turn instead")
    p.add_argument("--json", action="store_true", help="print the rows as a JSON list of objects")
    p.set_defaults(func=cmd_turns)


def cmd_turns(args) -> int:
    from backend.credit import main_channel  # noqa: PLC0415 - heavy (torch, estimators); see backend/cli/__init__.py
    from backend.views import turns  # noqa: PLC0415 - heavy, as above

    handle = store_handle(args.db)
    args.estimator = as_trained.chosen_estimator(handle, args.run, args.estimator)
    config = main_channel.config_on_channel(
        handle, args.run, args.estimator, parse_overrides(args.overrides), args.channel
    )
    if args.group is None:
        frame = turns.turn_shares(handle, args.run, args.estimator, config)
    else:
        frame = turns.group_turns(handle, args.run, args.group, args.estimator, config)
    if args.json:
        sys.stdout.write(frame.to_json(orient="records", double_precision=15))
        sys.stdout.write("\n")
    else:
        shown = frame.assign(text=frame["text"].map(repr)) if "text" in frame else frame
        print(shown.to_string(index=False))
    what = f"turns of group {args.group}" if args.group is not None else "step and turn rows"
    print(f"{len(frame)} {what} ({args.estimator})", file=sys.stderr)
    return 0
