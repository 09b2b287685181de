"""`creditlens verify-steps`: a step verifier's per-step scores as a run's process channel."""

from __future__ import annotations

import json

from backend.cli.common import add_db_arg
from backend.rewards.registry import describe_step_verifiers
from backend.rewards.step_scores import verify_steps
from backend.store import store_handle


def add_commands(sub) -> None:
    known = ", ".join(d["name"] for d in describe_step_verifiers())
    p = sub.add_parser(
        "verify-steps",
        help="score each step (line) of every rollout with a step verifier "
        "and store the scores as the run's process channel",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument(
        "--step-verifier",
        default="arithmetic_steps",
        help=f"a registered step verifier ({known}) or module:function "
        "fn(prompt, response, ground_truth) -> list[Step] (default arithmetic_steps)",
    )
    p.add_argument("--channel", default="process", help="the channel to (re)write (default process)")
    p.add_argument(
        "--json", action="store_true", help="print the report, with each first wrong step, as JSON"
    )
    p.set_defaults(func=cmd_verify_steps)


def cmd_verify_steps(args) -> int:
    report = verify_steps(store_handle(args.db), args.run, args.step_verifier, args.channel)
    if args.json:
        print(json.dumps(report.to_json()))
        return 0
    print(
        f"run {args.run!r}: channel {report.channel!r} from {report.step_verifier}: {report.rollouts} "
        f"rollouts, {report.steps} steps, {report.wrong_steps} wrong; {report.with_wrong_step} rollouts "
        "have a wrong step"
    )
    return 0
