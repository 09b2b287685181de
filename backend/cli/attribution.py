"""`creditlens attribution`: whose credit moved a token — each token of the group (or step) with its
first-order share of the change the step's update made to the chosen token's log-prob."""

from __future__ import annotations

import json
import math

from backend.cli.common import ESTIMATOR_HELP, add_db_arg
from backend.core.errors import InputError
from backend.store import store_handle

SHOWN = 12


def add_commands(sub) -> None:
    p = sub.add_parser(
        "attribution",
        help="whose credit moved a token: each trained token's first-order share lr·c_s·⟨∇log π_s, ∇log π_t⟩ "
        "of the change of token t's log-prob after its step's update (gradients of the step's checkpoint)",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name (see `creditlens runs`)")
    p.add_argument("--rollout", type=int, default=None, help="the rollout id of the token")
    p.add_argument("--pos", type=int, default=None, help="the token's position in the response (from 0)")
    p.add_argument(
        "--step",
        type=int,
        default=None,
        help="instead of --rollout/--pos: the predicted Δ log π of every token of this step (the sum of its "
        "shares over the step), to set beside the realized change",
    )
    p.add_argument(
        "--scope",
        choices=("group", "step"),
        default="group",
        help="whose shares: the rollout's group (default) or every rollout of its step",
    )
    p.add_argument("--estimator", default=None, help="the credit A_s; " + ESTIMATOR_HELP)
    p.add_argument(
        "--lr",
        type=float,
        default=None,
        help="learning rate (default: the run's learning_rate, else 1: shares per unit learning rate)",
    )
    p.add_argument(
        "--model",
        default=None,
        help="a local Hugging Face folder used on purpose (marked off-policy unless it is the checkpoint "
        "that sampled the step); default: the step's checkpoint (`creditlens checkpoints`)",
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)")
    p.add_argument("--json", action="store_true", help="print every token's share as JSON")
    p.set_defaults(func=cmd_attribution)


def cmd_attribution(args) -> int:
    from backend.views.attribution import attribute  # noqa: PLC0415 - heavy (torch, transformers)

    if args.step is not None:
        if args.rollout is not None or args.pos is not None:
            raise InputError("--step: give either --step or --rollout with --pos, not both")
        return _predicted_step(args)
    if args.rollout is None or args.pos is None:
        raise InputError(
            "give --rollout and --pos (one token's shares), or --step (every token's prediction)"
        )
    result = attribute(
        store_handle(args.db),
        args.run,
        args.rollout,
        args.pos,
        scope=args.scope,
        estimator=args.estimator,
        model=args.model,
        device=args.device,
        lr=args.lr,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=1, default=_plain))
        return 0
    head = f"run {result.run!r}, rollout {result.rollout}, token {result.pos} {result.token!r}"
    head += f" (step {result.step})"
    print(
        f"{head}: predicted Δ log π = {result.predicted:+.3g}, the sum of {len(result.shares)} shares "
        f"({result.scope})"
    )
    print(f"model: {result.model['why']} ({result.model['label']}); credit: {result.estimator}")
    for note in result.setup.notes:
        print(f"  {note}")
    top = result.shares.reindex(result.shares["share"].abs().sort_values(ascending=False).index).head(SHOWN)
    print(f"largest shares (of {len(result.shares)}):")
    print(f"{'rollout':>8}{'pos':>5}  {'token':<8}{'credit':>9}{'⟨∇s,∇t⟩':>11}{'share':>12}")
    for row in top.itertuples():
        print(
            f"{row.rollout_id:>8}{row.pos:>5}  {row.token!r:<8}{row.advantage:>9.3f}{row.inner:>11.3g}"
            f"{row.share + 0.0:>12.3g}"
        )
    return 0


def _predicted_step(args) -> int:
    from backend.views.attribution import predicted_step  # noqa: PLC0415 - heavy (torch, transformers)

    frame = predicted_step(
        store_handle(args.db),
        args.run,
        args.step,
        estimator=args.estimator,
        model=args.model,
        device=args.device,
        lr=args.lr,
    )
    if args.json:
        print(json.dumps(frame.to_dict(orient="records"), indent=1, default=_plain))
        return 0
    print(f"run {args.run!r}, step {args.step}: predicted Δ log π of {len(frame)} tokens after its update")
    by_rollout = frame.groupby("rollout_id")["predicted"].agg(["mean", "min", "max"])
    print(f"{'rollout':>8}{'mean':>12}{'min':>12}{'max':>12}")
    for rollout_id, row in by_rollout.iterrows():
        print(f"{rollout_id:>8}{row['mean']:>12.3g}{row['min']:>12.3g}{row['max']:>12.3g}")
    return 0


def _plain(value):
    """numpy scalars as Python numbers (json cannot write them); NaN as null."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value
