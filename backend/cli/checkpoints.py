"""`creditlens checkpoints`: list or attach the checkpoint that sampled each step of a run."""

from __future__ import annotations

import json

from backend.cli.common import add_db_arg
from backend.store import checkpoints, open_store


def add_commands(sub) -> None:
    p = sub.add_parser(
        "checkpoints",
        help="list or attach the checkpoint that sampled each step of a run "
        "(the model jobs use it by default)",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument("--set", action="append", default=[], metavar="STEP=DIR", help="attach one (repeatable)")
    p.add_argument(
        "--template",
        default=None,
        metavar="T",
        help="attach every step whose folder exists under a template such as ckpts/step_{step}",
    )
    p.add_argument("--file", default=None, metavar="F", help="attach a JSON or TOML file of step -> folder")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.set_defaults(func=cmd_checkpoints)


def cmd_checkpoints(args) -> int:
    changes = bool(args.set or args.template or args.file)
    with open_store(args.db, read_only=not changes) as store:
        attached = (
            checkpoints.attach(
                store, args.run, assignments=args.set, template=args.template, mapping_file=args.file
            )
            if changes
            else {}
        )
        table = checkpoints.checkpoint_table(store, args.run)
        run_model = store.run_info(args.run).get("model_dir")
    if args.json:
        print(json.dumps({"run": args.run, "model": run_model, "steps": table}, indent=1))
        return 0
    if attached:
        print(f"attached {len(attached)} checkpoint(s) to run {args.run!r}")
    print(f"run {args.run!r} (model {run_model or 'none'}): which checkpoint sampled each step")
    print(f"{'step':>6}{'rollouts':>10}  checkpoint")
    for row in table:
        where = row["checkpoint"] or "unknown"
        if row["checkpoint"] and not row["exists"]:
            where += "  (missing on this machine)"
        print(f"{row['step']:>6}{row['rollouts']:>10}  {where}")
    return 0
