"""`creditlens compare ...`: several estimators on one rollout read as one credit (the Compare view's
numbers: `backend.views.compare.compare_rollout`, the function the view's numbers come from)."""

from __future__ import annotations

import json
import math
import sys

from backend.cli.common import add_db_arg, parse_overrides
from backend.core.errors import InputError
from backend.store import store_handle


def add_commands(sub) -> None:
    p = sub.add_parser(
        "compare",
        help="the Compare view: estimators on one rollout, one credit; credit and penalty by token class",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument("--rollout", required=True, type=int, help="rollout id")
    p.add_argument(
        "--estimator",
        action="append",
        required=True,
        help="estimator to compare, repeatable (1 to 6; its default parameters)",
    )
    p.add_argument(
        "--credit",
        default="final",
        help="the one credit every number reads: final (default, A_final = Σ_c β_c·Ã_c), channel:NAME "
        "(that channel's term β·Ã of A_final) or summed (the what-if on the scores summed first); a wrong "
        "one lists the run's choices",
    )
    p.add_argument(
        "--beta",
        action="append",
        default=[],
        metavar="CHANNEL=VALUE",
        help="β of a channel in A_final, repeatable (default: the run's defaults)",
    )
    p.add_argument(
        "--json",
        action="store_true",
        help="one JSON object: credit, credit_choices, tokens, untrained, rows, agreement, and mass (per "
        "estimator and class: credit_share, penalty_share, abs_share, token_share, credit_mass, "
        "penalty_mass)",
    )
    p.set_defaults(func=cmd_compare)


def cmd_compare(args) -> int:
    from backend.estimators import registry  # noqa: PLC0415 - heavy (torch); see backend/cli/__init__.py
    from backend.views import compare  # noqa: PLC0415 - idem

    if not 1 <= len(args.estimator) <= 6:
        raise InputError(f"--estimator: give 1 to 6 estimators, got {len(args.estimator)}")
    names = [registry.canonical(name) for name in args.estimator]
    for name in names:
        try:
            registry.get(name)
        except KeyError as exc:
            raise InputError(f"--estimator {name!r}: {exc.args[0]}") from None
    betas = {}
    for key, value in parse_overrides(args.beta).items():
        try:
            betas[key] = float(value)
        except ValueError:
            raise InputError(f"--beta {key}={value}: not a number") from None
    handle = store_handle(args.db)
    with handle.read() as store:
        store.run_id(args.run)
    out = compare.compare_rollout(
        handle, args.run, args.rollout, [(n, ()) for n in names], args.credit, betas=betas or None
    )
    choices = out["choices"]
    if args.json:
        json.dump(
            {
                "run": args.run,
                "rollout_id": args.rollout,
                "credit": out["credit"],
                "credit_choices": [{"key": c.key, "label": c.label, "help": c.help} for c in choices],
                "tokens": out["tokens"],
                "untrained": [bool(u) for u in out["untrained"]],
                "rows": {k: [_number(v) for v in row] for k, row in out["rollout"].items()},
                "errors": out["errors"],
                "agreement": {
                    a: {b: _number(v) for b, v in row.items()}
                    for a, row in out["agreement"].to_dict(orient="index").items()
                },
                "mass": compare.mass_records(out["mass"]),
            },
            sys.stdout,
        )
        print()
        return 0
    label = next(c.label for c in choices if c.key == out["credit"])
    print(f"rollout {args.rollout} of {args.run}: {label}; shares of each estimator's Σ|A| over its group")
    for name, message in out["errors"].items():
        print(f"{name}: cannot run: {message}")
    mass = out["mass"]
    print(f"{'estimator':<16} {'class':<14} {'credit':>8} {'penalty':>8} {'|A|':>8} {'tokens':>8}")
    for r in mass.itertuples():
        print(
            f"{r.estimator:<16.16} {r.token_class:<14.14} {_pct(r.credit_share)} {_pct(r.penalty_share)} "
            f"{_pct(r.abs_share)} {_pct(r.token_share)}"
        )
    return 0


def _number(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def _pct(v: float) -> str:
    return f"{v:>8.1%}" if math.isfinite(v) else f"{'–':>8}"
