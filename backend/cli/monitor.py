"""`creditlens monitor ...`: the credit-health detectors over a run's steps, with a linter's exit code
(0: nothing to warn about, 1: a warn or an alert, 2: bad input). `backend.monitor.monitors.run_monitors` is
the function the Trends view calls, so the alerts match."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from backend.cli.common import ESTIMATOR_DEFAULT, add_db_arg, add_set_arg, add_workers_args, parse_overrides
from backend.core.errors import InputError
from backend.credit import as_trained, main_channel
from backend.monitor import config as monitor_config
from backend.store import StoreBusy, store_handle

if TYPE_CHECKING:
    from backend.monitor import monitors as monitor


def add_commands(sub) -> None:
    p = sub.add_parser(
        "monitor",
        help="credit-health detectors: the step where reward hacking, collapse or "
        "drift starts, and the rollouts that show it (exit 1 on a warning)",
    )
    add_db_arg(p)
    p.add_argument("--run", default=None, help="run name")
    p.add_argument(
        "--estimator", default=None, help="estimator whose credit is watched; " + ESTIMATOR_DEFAULT
    )
    add_set_arg(p)
    p.add_argument(
        "--channel",
        default=None,
        help="reward channel the estimator reads (default: the run's main channel); 'all': the "
        "channel scores summed per rollout",
    )
    p.add_argument(
        "--config",
        type=Path,
        default=None,
        metavar="FILE",
        help="TOML file of thresholds (docs/monitors.md; --defaults prints every key)",
    )
    p.add_argument("--defaults", action="store_true", help="print the default settings as TOML and exit")
    p.add_argument("--json", action="store_true", help="print the alerts as a JSON list of objects")
    add_workers_args(p, "the estimator's chunks when its output is not in the store yet")
    p.set_defaults(func=cmd_monitor)


def config_of(handle, run: str, estimator: str, pairs: list[str], channel: str | None) -> tuple:
    """The estimator's `--set` pairs on `--channel` (checked; default: the run's main channel)."""
    return main_channel.config_on_channel(handle, run, estimator, parse_overrides(pairs), channel)


def print_alerts(alerts: list[monitor.Alert], out=None) -> None:
    """One block per alert: severity, detector, statistic, the message, the rollouts (to stdout)."""
    out = out or sys.stdout
    for a in alerts:
        print(f"{a.severity.upper():<5} step {a.step:<5} {a.detector} ({a.statistic}): {a.message}", file=out)
        if a.rollouts:
            print(f"      rollouts: {', '.join(map(str, a.rollouts))}", file=out)


def cmd_monitor(args) -> int:
    if args.defaults:
        sys.stdout.write(monitor_config.defaults_toml())
        return 0
    if args.run is None:
        raise InputError("--run is required (the run to monitor)")
    from backend.monitor import monitors as monitor  # noqa: PLC0415 - heavy (torch, estimators); see backend/cli/__init__.py

    settings = monitor_config.load_settings(args.config)
    handle = store_handle(args.db)
    args.estimator = as_trained.chosen_estimator(handle, args.run, args.estimator)
    config = config_of(handle, args.run, args.estimator, args.overrides, args.channel)
    report = monitor.run_monitors(handle, args.run, args.estimator, config, settings)
    for note in report.notes:
        print(f"note: {note}", file=sys.stderr)
    if args.json:
        json.dump([a.as_dict() for a in report.alerts], sys.stdout)
        print()
    else:
        print_alerts(report.alerts)
    counts = {s: sum(a.severity == s for a in report.alerts) for s in monitor.SEVERITIES}
    print(
        f"{len(report.series)} steps of {args.run!r} ({report.estimator} on {report.channel}): "
        + ", ".join(f"{n} {s}" for s, n in counts.items()),
        file=sys.stderr,
    )
    return report.exit_code()


def live_monitor(args):
    """For `import --follow --monitor`: a function of the run name that reruns the monitors (grpo on the
    run's main channel, `--monitor-config` settings) and prints the alerts not printed before. The
    settings are read before anything is imported, so a bad file stops the command at once."""
    from backend.monitor import monitors as monitor  # noqa: PLC0415 - heavy (torch, estimators); see backend/cli/__init__.py

    settings = monitor_config.load_settings(args.monitor_config)
    handle = store_handle(args.db, create=True)  # the follower creates the store with its first import
    watchers: dict[str, monitor.LiveMonitor] = {}

    def watch(run: str) -> None:
        if run not in watchers:
            watchers[run] = monitor.LiveMonitor(handle, run, settings=settings)
        try:
            print_alerts(watchers[run].update())
        except StoreBusy as exc:  # the monitors read the whole run: the next step's update misses nothing
            print(f"monitors skipped this step: {exc}", file=sys.stderr)
        sys.stdout.flush()

    return watch
