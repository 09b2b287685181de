"""`creditlens tune ...`: β and τ on the whole run, the numbers of the Tune view (`backend.views.tune.tune`):
the dual-ascent replay per step and constrained channel, each channel's violation threshold, and the
run-level effect of a β (channel and class shares of |A|, over the run and per step, before and after)."""

from __future__ import annotations

import json
import math

from backend.cli.common import add_db_arg, add_set_arg, parse_overrides
from backend.core.errors import InputError
from backend.credit import main_channel
from backend.store import store_handle

MODES = ("projected", "lexicographic")  # backend.views.tune.MODES (imported on use: it imports torch)
DEFAULT_TAU = 0.1  # backend.views.tune.DEFAULT_TAU, idem


def add_commands(sub) -> None:
    p = sub.add_parser(
        "tune",
        help="β and τ on the whole run: the dual-ascent replay (violation rate and β per step and channel) "
        "and what a β does to the run's channel and class shares (the Tune view's numbers)",
    )
    add_db_arg(p)
    p.add_argument("--run", required=True, help="run name")
    p.add_argument(
        "--estimator",
        default="grpo",
        help="estimator of the outcome channels of the what-if β weighs (default grpo; the trainer's own "
        "advantage has no β of Credit Lens's)",
    )
    add_set_arg(p)
    p.add_argument(
        "--channel",
        default=None,
        help="the channel looked at (default: the run's main channel); every other scored channel with a β "
        "of its own can be constrained",
    )
    pairs = {"action": "append", "default": [], "metavar": "CHANNEL=VALUE"}
    p.add_argument("--beta", **pairs, help="β of a channel: where the replay starts (default: 1, KL 0.05)")
    p.add_argument(
        "--tau",
        **pairs,
        help=f"target violation rate of a constrained channel (default {DEFAULT_TAU})",
    )
    p.add_argument(
        "--violation",
        **pairs,
        help="threshold of a channel: a score below it is a violation (default: 0 for a channel that goes "
        "negative, 1 for a 0/1 reward, 0.5 for scores in [0, 1])",
    )
    p.add_argument("--eta", type=float, default=1.0, help="dual step size η (default 1)")
    p.add_argument("--mode", choices=MODES, default="projected", help="dual ascent mode (default projected)")
    p.add_argument(
        "--effect-of",
        choices=("replay", "beta"),
        default="replay",
        help="the β whose effect on the run is shown against the default β: the replay's last step "
        "(default) or the --beta values as given",
    )
    p.add_argument(
        "--no-effect", action="store_true", help="only the replay (skips computing the run's credit)"
    )
    p.add_argument("--json", action="store_true", help="print everything as one JSON object")
    p.set_defaults(func=cmd_tune)


def numbers(pairs: list[str], option: str) -> dict[str, float]:
    """`CHANNEL=VALUE` pairs as channel -> float (an InputError names the bad one)."""
    out = {}
    for channel, text in parse_overrides(pairs).items():
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value):
            raise InputError(f"{option} {channel}={text}: expected a number, e.g. {option} {channel}=0.5")
        out[channel] = value
    return out


def cmd_tune(args) -> int:
    from backend.views import tune as tuning  # noqa: PLC0415 - heavy (torch, every estimator); on use

    handle = store_handle(args.db)
    config = main_channel.config_on_channel(
        handle, args.run, args.estimator, parse_overrides(args.overrides), None
    )
    config = tuple((k, v) for k, v in config if k != "channel")
    result = tuning.tune(
        handle,
        args.run,
        args.estimator,
        config,
        args.channel,
        numbers(args.beta, "--beta"),
        numbers(args.tau, "--tau"),
        numbers(args.violation, "--violation"),
        args.eta,
        args.mode,
        args.effect_of,
        effect=not args.no_effect,
    )
    if args.json:
        print(json.dumps(result.to_json(), indent=1))
        return 0
    print_tuning(result)
    return 0


def print_tuning(result) -> None:
    """A `backend.views.tune.Tuning` as text."""
    print(f"run {result.run}: {result.estimator} on {result.channel}, η {result.eta:g}, {result.mode}")
    print("violation thresholds (a score below is a violation):")
    for c, t in result.thresholds.items():
        mark = "" if t.value == t.default else f" (default {t.default:g})"
        print(f"  {c:<16} {t.value:g}{mark}   scores in [{t.low:g}, {t.high:g}]: {t.why}")
    for note in result.notes:
        print(f"note: {note}")
    if not result.replay.empty:
        print("replay: violation rate → β after the step")
        for r in result.replay.itertuples(index=False):
            print(
                f"  step {r.step:<5} {r.channel:<16} rate {r.violation_rate:.3f} (τ {r.tau:g})"
                f"  β {r.beta:.4g}"
            )
    print("β: " + ", ".join(f"{c} {result.beta_start[c]:g} → {b:.4g}" for c, b in result.beta_after.items()))
    if result.effect is not None:
        whole = result.effect[result.effect["step"].isna()]
        for kind in ("channel", "class"):
            part = whole[whole["kind"] == kind].pivot(index="name", columns="which", values="share")
            print(f"share of |A| per {kind} over the run (before → after):")
            for name, row in part.iterrows():
                print(f"  {name:<16} {row['before']:7.1%} → {row['after']:7.1%}")
