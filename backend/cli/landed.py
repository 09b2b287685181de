"""`creditlens landed ...`: did the credit land? Per trained token the realized Δ log π after the update that
consumed its step, and how well the credit describes it, per step, class, rollout and estimator
(`backend.credit.landed`, the functions the views call). Where the run has no recorded `logprobs_after`,
the step's rollouts are first scored with the after-update checkpoints (`backend.models.landed_scoring`,
cached in the store)."""

from __future__ import annotations

import json
import math
import sys

from backend.cli.common import ESTIMATOR_DEFAULT, add_db_arg, add_set_arg, parse_overrides
from backend.core.errors import InputError
from backend.store import store_handle

SOURCE_HELP = (
    "where log π after the update comes from: recorded (the TRL recorder's logprobs_after), checkpoints "
    "(score the step's rollouts with the checkpoint after its update, cached), auto (default: recorded "
    "when the run has it, else checkpoints)"
)


def add_commands(sub) -> None:
    p = sub.add_parser(
        "landed",
        help="did the credit land: realized Δ log π per token after each update, and how well the credit "
        "predicts it per step, token class, rollout and estimator",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument("--steps", default=None, help="comma-separated steps (default: every step with a Δ)")
    p.add_argument("--source", choices=("auto", "recorded", "checkpoints"), default="auto", help=SOURCE_HELP)
    p.add_argument("--estimator", default=None, help="whose credit is compared with Δ; " + ESTIMATOR_DEFAULT)
    add_set_arg(p)
    p.add_argument(
        "--compare",
        default=None,
        metavar="E1,E2,...",
        help="also rank these estimators (default parameters) by how well their credit predicts Δ",
    )
    p.add_argument("--rollouts", action="store_true", help="also the per-rollout agreement table")
    p.add_argument(
        "--engine",
        choices=("auto", "transformers", "vllm"),
        default="transformers",
        help="engine of the checkpoint route (default: transformers; vllm: its prompt_logprobs, on a GPU)",
    )
    p.add_argument("--device", default=None, help="cpu, cuda, cuda:1 (default: cuda when available)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_landed)


def parse_steps(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        steps = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise InputError(f"--steps takes comma-separated whole numbers, got {text!r}") from None
    if not steps or min(steps) < 0:
        raise InputError(f"--steps takes comma-separated whole numbers, got {text!r}")
    return steps


def cmd_landed(args) -> int:
    from backend.credit import landed  # noqa: PLC0415 - heavy (torch, estimators); see backend/cli/__init__.py

    steps = parse_steps(args.steps)
    handle = store_handle(args.db)
    if args.source == "checkpoints" or (args.source == "auto" and not _has_recorded(handle, args.run)):
        _score_checkpoints(handle, args, steps)
    tokens = landed.landed_tokens(
        handle, args.run, args.estimator, parse_overrides(args.overrides), source=args.source, steps=steps
    )
    out = {
        "run": args.run,
        "estimator": tokens.estimator,
        "source": tokens.source,
        "steps": _records(landed.by_step(tokens)),
        "classes": _records(landed.by_class(tokens)),
        "classes_by_step": _records(landed.by_class(tokens, per_step=True)),
    }
    if args.rollouts:
        out["rollouts"] = _records(landed.by_rollout(tokens))
    if args.compare:
        names = [n.strip() for n in args.compare.split(",") if n.strip()]
        out["estimators"] = _records(
            landed.by_estimator(handle, args.run, names, source=tokens.source, steps=steps)
        )
    if args.json:
        json.dump(out, sys.stdout)
        print()
        return 0
    print(f"{args.run}: credit ({tokens.estimator}) vs realized Δ log π ({tokens.source} route)")
    _print_table(out["steps"], ["step", "tokens", "spearman", "sign_agreement", "mean_delta"])
    print()
    _print_table(out["classes"], ["token_class", "tokens", "credit_share", "mean_credit", "mean_delta"])
    for key, columns in (
        ("rollouts", ["rollout_id", "step", "tokens", "landed_spearman", "landed_sign", "landed_mean_delta"]),
        ("estimators", ["estimator", "tokens", "spearman", "sign_agreement", "mean_step_spearman"]),
    ):
        if key in out:
            print()
            _print_table(out[key], columns)
    return 0


def _has_recorded(handle, run: str) -> bool:
    from backend.store.landed_queries import recorded_after  # noqa: PLC0415 - light; kept beside its use

    with handle.read() as store:
        if not store.has_run(run):
            raise InputError(f"no run named {run!r} (see `creditlens runs`)")
        return bool(recorded_after(store, run))


def _score_checkpoints(handle, args, steps: list[int] | None) -> None:
    from backend.models import landed_scoring  # noqa: PLC0415 - heavy (transformers); on use

    done = landed_scoring.score_after(handle, args.run, steps, engine=args.engine, device=args.device)
    for folder, n in done.scored.items():
        print(f"scored {n} rollouts with {folder}", file=sys.stderr)
    if done.cached:
        print(f"{done.cached} rollouts already scored (cached in the store)", file=sys.stderr)


def _records(frame) -> list[dict]:
    """Rows as JSON-ready dicts: NaN (undefined: a constant side, no credited token) becomes null."""
    rows = frame.to_dict(orient="records")
    return [
        {k: (None if isinstance(v, float) and math.isnan(v) else _plain(v)) for k, v in row.items()}
        for row in rows
    ]


def _plain(value):
    return value.item() if hasattr(value, "item") else value


def _print_table(rows: list[dict], columns: list[str]) -> None:
    print("  ".join(f"{c:>14}" for c in columns))
    for row in rows:
        cells = []
        for c in columns:
            v = row.get(c)
            cells.append(
                f"{'—':>14}" if v is None else f"{v:>14.4g}" if isinstance(v, float) else f"{v!s:>14}"
            )
        print("  ".join(cells))
