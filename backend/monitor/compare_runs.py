"""`creditlens compare-runs`, `creditlens.open().compare([...])` and the Runs comparison view: one row per
run (`backend.views.compare_runs.summary_row`) with the monitors' earliest warning.

Here rather than in backend/views because it runs the monitors, which stand on the views' trends.
"""

from __future__ import annotations

import pandas as pd

from backend.credit import main_channel
from backend.monitor import monitors
from backend.monitor.config import MonitorSettings
from backend.store import StoreHandle
from backend.views import compare_runs as rows_of
from backend.views import explorer

WARNINGS = ("warn", "alert")
"""The severities that count for `first_alert_step`: an `info` onset sits at the run's last steps and is not
yet persistent, so it is not a warning (`creditlens monitor` exits 0 on it too)."""


def compare_runs(
    handle: StoreHandle,
    runs: list[str] | tuple[str, ...],
    estimator: str = "grpo",
    overrides: dict | None = None,
    channel: str | None = None,
    *,
    settings: MonitorSettings = MonitorSettings(),
    channel_as: str = main_channel.CLI_CHANNEL,
) -> pd.DataFrame:
    """One row per run, in the order given: run, source, steps, rollouts, tokens, first_step, last_step,
    last_score_<channel> and best_score_<channel> (its largest step mean), first_share_<class> and
    last_share_<class> (of A_final with `estimator`, at the first and last step), last_mean_entropy, last_kl,
    last_length, config_source, config (the stored configuration, flattened; {} when none is stored),
    warnings (how many warn/alert the monitors raise with `estimator`), first_alert_step,
    first_alert_detector and first_alert_statistic (the earliest warning's onset; None on a quiet run), and
    `config.<key>` for each configuration key whose value differs between the runs. Each run reads
    `channel` (default: its own main channel) with the `overrides` (`--set` pairs). The columns come in
    that order after `run` once those that differ between the runs are taken to the front (the differing
    `config.<key>` first: `rows_of.differing_first`)."""
    runs = rows_of.check_runs(runs)
    rows = []
    with handle.kept_open():  # the reads share one connection (opening one costs ~12 ms; 13 were opened)
        with handle.read() as store:
            metas = {run: store.run_info(run)["meta"] for run in runs}  # an unknown run: the error lists them
            sizes = {r["name"]: r for r in store.list_runs()}
        for run in runs:
            config = rows_of.estimator_config(
                handle, run, estimator, dict(overrides or {}), channel, channel_as
            )
            trends = explorer.step_trends(handle, run, estimator, config, quantiles=False)
            row = rows_of.summary_row(run, sizes[run], trends, metas[run])
            warnings = _warnings(handle, run, estimator, config, settings)
            earliest = warnings[0] if warnings else None
            row["warnings"] = len(warnings)
            row["first_alert_step"] = None if earliest is None else int(earliest.step)
            row["first_alert_detector"] = None if earliest is None else earliest.detector
            row["first_alert_statistic"] = None if earliest is None else earliest.statistic
            rows.append(row)
    rows_of.add_config_differences(rows)
    frame = pd.DataFrame(rows)
    for column in ("first_step", "last_step", "first_alert_step"):  # whole steps, empty where none
        frame[column] = frame[column].astype("Int64")
    return rows_of.differing_first(frame)


ALERT_COLUMNS = ("run", "step", "severity", "detector", "statistic")


def run_alerts(
    handle: StoreHandle,
    runs: list[str] | tuple[str, ...],
    estimator: str = "grpo",
    overrides: dict | None = None,
    channel: str | None = None,
    *,
    settings: MonitorSettings = MonitorSettings(),
    channel_as: str = main_channel.CLI_CHANNEL,
) -> pd.DataFrame:
    """Every warning (warn or alert) the monitors raise on each run, one row each: run, step (the onset),
    severity, detector, statistic; runs in the order given, each run's by step. `compare_runs`'s
    first_alert_step is each run's first row here; the Trends view over several runs marks these rows on
    each run's trace (`creditlens compare-runs --alerts`)."""
    runs = rows_of.check_runs(runs)
    with handle.read() as store:
        for run in runs:
            store.run_info(run)  # an unknown run: the error lists the known ones
    rows = []
    with handle.kept_open():  # the reads share one connection
        for run in runs:
            config = rows_of.estimator_config(
                handle, run, estimator, dict(overrides or {}), channel, channel_as
            )
            rows += [
                {
                    "run": run,
                    "step": int(a.step),
                    "severity": a.severity,
                    "detector": a.detector,
                    "statistic": a.statistic,
                }
                for a in _warnings(handle, run, estimator, config, settings, prepare_missing=True)
            ]
    frame = pd.DataFrame(rows, columns=list(ALERT_COLUMNS))
    frame["step"] = frame["step"].astype("int64")
    return frame


def _warnings(
    handle: StoreHandle,
    run: str,
    estimator: str,
    config,
    settings: MonitorSettings,
    prepare_missing: bool = False,
) -> list:
    """The run's warn/alert onsets, earliest first (ties by detector and statistic); `prepare_missing`
    computes the credit summaries the monitors read when they are not stored yet."""
    report = monitors.run_monitors(handle, run, estimator, config, settings, prepare_missing=prepare_missing)
    found = [a for a in report.alerts if a.severity in WARNINGS]
    return sorted(found, key=lambda a: (a.step, a.detector, a.statistic))
