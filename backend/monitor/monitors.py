"""Credit-health monitors: per-step statistics of a run, the step where each starts to depart from the
run's own history, and alerts that name the rollouts showing it most.

`run_monitors` is what `creditlens monitor` prints and what the Trends view marks. The statistics come
from the per-rollout summaries the Explorer and Trends read (`explorer.step_trends`, the credit summaries
of the chosen estimator and channel, `monitor_queries`), read on one connection, plus the split-channel
credit's per-rollout summary (`monitor_channels`: computed from the tokens once, then stored). The
detectors and their defaults live in `backend.monitor.config`; the onset rule in
`backend.monitor.change_point`. A detector whose data the run lacks (no reference logprobs, no logged
advantage, one channel) is skipped with a note.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

import numpy as np
import pandas as pd

from backend.credit import main_channel
from backend.monitor import channels as monitor_channels
from backend.monitor.change_point import find_onset
from backend.monitor.config import MonitorSettings
from backend.store import StoreHandle
from backend.store import monitor_queries as queries
from backend.views import explorer
from backend.views.explorer import ExplorerQuery

SEVERITIES = ("info", "warn", "alert")
channel_step_shares = monitor_channels.channel_step_shares  # the in-memory reference, under its old name


@dataclass
class Alert:
    """detector: its name (monitor_config.DETECTORS); statistic: the series that departed (e.g.
    `pos_share_filler`); step: the onset; severity: info (departing at the run's last steps, not yet
    persistent), warn or alert; value / baseline / noise: the statistic at the onset, the median of the
    earlier steps and their 1.4826·MAD; z: (value − baseline) / noise; rollouts: ids of the onset step's
    rollouts that show it most; explorer: the Explorer's filter and sort that list them (`where`, `sort`),
    empty when the column is not one of the Explorer's."""

    detector: str
    statistic: str
    step: int
    severity: str
    value: float
    baseline: float
    noise: float
    z: float
    message: str
    rollouts: list[int] = field(default_factory=list)
    explorer: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        out = asdict(self)
        for key in ("value", "baseline", "noise", "z"):  # JSON has no inf or NaN
            v = out[key]
            out[key] = None if not math.isfinite(v) else v
        return out


@dataclass
class MonitorReport:
    """alerts: in step order; series: one row per step, a column per statistic the detectors watched;
    notes: detectors skipped and why."""

    run: str
    estimator: str
    channel: str
    alerts: list[Alert]
    series: pd.DataFrame
    notes: list[str] = field(default_factory=list)

    def exit_code(self) -> int:
        """0 without a warn or alert, 1 with one (a linter's convention)."""
        return int(any(a.severity != "info" for a in self.alerts))


@dataclass(frozen=True)
class _Series:
    detector: str
    statistic: str
    label: str  # what the message calls it
    percent: bool = False
    sort: str | None = None  # the Explorer column that ranks the rollouts (None: own ranking)
    where: tuple[str, ...] = ()
    count: str | None = None  # for a share of items: the trends column counting them (binomial noise)


def _fmt(value: float, percent: bool) -> str:
    if not math.isfinite(value):
        return "n/a"
    return f"{100 * value:.1f}%" if percent else f"{value:.4g}"


def _z_text(z: float) -> str:
    """z as people read it: past 1000 the baseline simply had (almost) no spread."""
    return f"{z:+.1f}" if abs(z) < 1000 else ("> +1000" if z > 0 else "< -1000")


@dataclass
class _Watched:
    """The statistics the detectors watch, gathered in detector order: `columns` (one value per step, a
    frame once complete), their `specs`, `notes` on the detectors skipped and why, and `extra`, the
    per-rollout values of the statistics that rank rollouts on their own (statistic -> step -> values)."""

    steps: pd.Series
    columns: dict[str, np.ndarray]
    specs: list[_Series] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, dict[int, pd.Series]] = field(default_factory=dict)

    def add(self, spec: _Series, values) -> None:
        self.columns[spec.statistic] = np.asarray(values, dtype=np.float64)
        self.specs.append(spec)

    def by_step(self, frame: pd.DataFrame, column: str):
        """`frame[column]` aligned to the run's steps (NaN where a step has no row)."""
        return frame.set_index(frame["step"].astype(int))[column].reindex(self.steps).to_numpy()


def run_monitors(
    handle: StoreHandle,
    run: str,
    estimator: str = "grpo",
    config: tuple = (),
    settings: MonitorSettings = MonitorSettings(),
    *,
    prepare_missing: bool = True,
) -> MonitorReport:
    """Every enabled detector over `run`'s steps, with `estimator` (`config`: its (key, value) pairs; a
    `channel` pair chooses the reward channel, default the run's main channel) for the credit statistics."""
    if prepare_missing:
        explorer.prepare(handle, run, estimator, config)
    takeover = settings.enabled("channel_takeover")
    groups = int(settings.option("channel_takeover", "groups_per_step")) if takeover else 0
    stored = None
    with handle.read() as store:  # one connection for every summary (opening one is a large part)
        channel = dict(config).get("channel") or store.main_channel(run)
        config = main_channel.on_channel(estimator, config, str(channel))
        channel = str(dict(config).get("channel", channel))
        trends = explorer.step_trends_in(store, run, estimator, config, quantiles=False)
        steps = trends["step"].astype(int)
        watched = _Watched(steps, {"step": steps.to_numpy()})
        counts = {"rollouts": trends["rollouts"].to_numpy(), "groups": trends["groups"].to_numpy()}
        run_id = store.run_id(run)
        key = explorer.credit_key(store, run, estimator, config)
        if takeover:
            split = monitor_channels.takeover_channel(store, run, channel)  # `all`: each channel alone
            stored = monitor_channels.read_step_shares(
                store, run_id, monitor_channels.channel_key(estimator, config, split, groups)
            )
        _watch_class_shares(watched, store, run_id, key, settings)
        _watch_trends(watched, trends, settings)
        _watch_text_and_logs(watched, store, run, run_id, key, settings)
    if takeover:
        shares, per_rollout = stored or monitor_channels.stored_step_shares(
            handle, run, estimator, config, split, groups
        )
        _watch_channel_shares(watched, shares, per_rollout)
    _note_short_run(watched, settings)
    found = (
        _alert(handle, run, estimator, config, settings, watched.columns, spec, key, watched.extra, counts)
        for spec in watched.specs
    )
    alerts = [a for a in found if a is not None]
    alerts.sort(key=lambda a: (a.step, a.detector, a.statistic))
    series = pd.DataFrame(watched.columns, index=steps.index)
    return MonitorReport(run, estimator, channel, alerts, series, watched.notes)


def _watch_class_shares(watched: _Watched, store, run_id: int, key, settings: MonitorSettings) -> None:
    """class_share: each token class's share of the positive and of the negative credit."""
    if not settings.enabled("class_share"):
        return
    signed = queries.step_signed_shares(store, run_id, key)
    for k, name in enumerate(key.classes):
        for sign, word in (("pos", "positive"), ("neg", "negative")):
            alias = explorer.column_name(f"{sign}_share", name)
            watched.add(
                _Series(
                    "class_share", alias, f"the share of the {word} credit on class {name!r}", True, alias
                ),
                watched.by_step(signed, f"{sign}_{k}"),
            )


def _watch_trends(watched: _Watched, trends: pd.DataFrame, settings: MonitorSettings) -> None:
    """The detectors over the Trends view's per-step columns; one whose column the run lacks is noted."""
    if settings.enabled("entropy_collapse"):
        if trends["mean_entropy"].notna().any():
            watched.add(
                _Series("entropy_collapse", "mean_entropy", "mean token entropy", sort="mean_entropy"),
                trends["mean_entropy"],
            )
        else:
            watched.notes.append("entropy_collapse: the run has no entropies")
    if settings.enabled("kl_acceleration"):
        if trends["kl"].notna().any():
            watched.add(
                _Series("kl_acceleration", "kl_growth", "KL growth per step", sort="kl"),
                trends["kl"].astype(float).diff(),
            )
        else:
            watched.notes.append("kl_acceleration: the run has no reference logprobs")
    if settings.enabled("length_drift"):
        watched.add(_Series("length_drift", "length", "mean length", sort="length"), trends["length"])
    if settings.enabled("truncation"):
        if trends["truncated_share"].notna().any():
            watched.add(
                _Series(
                    "truncation",
                    "truncated_share",
                    "truncated share",
                    True,
                    "length",
                    ("truncated=true",),
                    "rollouts",
                ),
                trends["truncated_share"],
            )
        else:
            watched.notes.append(
                "truncation: the run does not record truncation (meta.truncated/finish_reason)"
            )
    if settings.enabled("zero_variance"):
        watched.add(
            _Series(
                "zero_variance",
                "zero_variance_share",
                "share of zero-variance groups",
                True,
                "group_id",
                ("zero_variance=true",),
                "groups",
            ),
            trends["zero_variance_share"],
        )
    if settings.enabled("repetition"):
        watched.add(
            _Series("repetition", "repetition", "repeated 16-token windows", True, "repetition"),
            trends["repetition"],
        )


def _watch_text_and_logs(
    watched: _Watched, store, run: str, run_id: int, key, settings: MonitorSettings
) -> None:
    """garbled (from the text) and logged_gap (recomputed against the logged advantage), each with its own
    per-step query."""
    if settings.enabled("garbled"):
        garbled = queries.step_garbled(store, run_id)
        watched.add(_Series("garbled", "garbled", "garbled text", True), watched.by_step(garbled, "garbled"))
    if settings.enabled("logged_gap"):
        if explorer.logged_gap_available(store, run):
            watched.add(
                _Series("logged_gap", "abs_logged_gap", "mean |recomputed − logged advantage|"),
                watched.by_step(queries.step_logged_gap(store, run_id, key), "abs_logged_gap"),
            )
        else:
            watched.notes.append("logged_gap: the run has no logged advantage")


def _watch_channel_shares(watched: _Watched, shares: pd.DataFrame, per_rollout: dict) -> None:
    """channel_takeover: each reward channel's share of |β·Ã| per step, its rollouts ranked by their own."""
    if shares.shape[1] <= 2:
        watched.notes.append("channel_takeover: one channel carries all the credit (nothing to take over)")
        return
    for name in [c for c in shares.columns if c != "step"]:
        alias = explorer.column_name("channel_share", name)
        watched.add(
            _Series("channel_takeover", alias, f"the share of |β·Ã| on channel {name!r}", True),
            watched.by_step(shares.rename(columns={name: alias}), alias),
        )
        watched.extra[alias] = {s: frame[name] for s, frame in per_rollout.items()}


def _note_short_run(watched: _Watched, settings: MonitorSettings) -> None:
    """A note when the run has too few steps for any watched detector to call an onset."""
    steps = watched.steps
    needed = min((settings.rule(d).min_baseline for d in {w.detector for w in watched.specs}), default=0)
    if watched.specs and len(steps) <= needed:
        watched.notes.append(
            f"the run has {len(steps)} steps: an onset needs at least {needed} earlier steps "
            "(min_baseline), so nothing can be called yet"
        )


def _alert(
    handle: StoreHandle,
    run: str,
    estimator: str,
    config: tuple,
    settings: MonitorSettings,
    series: dict[str, np.ndarray],
    spec: _Series,
    key,
    extra: dict,
    counts: dict,
) -> Alert | None:
    rule = settings.rule(spec.detector)
    onset = find_onset(series[spec.statistic], rule, counts.get(spec.count))
    if onset is None:
        return None
    step = int(series["step"][onset.index])
    severity = "info" if onset.pending else ("alert" if onset.severe else "warn")
    up = onset.value > onset.baseline
    rollouts, view = _rollouts(
        handle, run, estimator, config, spec, step, up, settings.top_rollouts, key, extra
    )
    word = "rose" if up else "fell"
    message = (
        f"from step {step}, {spec.label} {word} to {_fmt(onset.value, spec.percent)} from a baseline "
        f"of {_fmt(onset.baseline, spec.percent)} (noise {_fmt(onset.noise, spec.percent)}, "
        f"z {_z_text(onset.z)})" + (" — not yet persistent" if onset.pending else "")
    )
    return Alert(
        spec.detector,
        spec.statistic,
        step,
        severity,
        onset.value,
        onset.baseline,
        onset.noise,
        onset.z,
        message,
        rollouts,
        view,
    )


def _rollouts(
    handle: StoreHandle,
    run: str,
    estimator: str,
    config: tuple,
    spec: _Series,
    step: int,
    up: bool,
    n: int,
    key,
    extra: dict,
) -> tuple[list[int], dict]:
    """The `n` rollouts of `step` that show the departure most, and the Explorer filter that lists them."""
    if spec.statistic in extra:
        values = extra[spec.statistic].get(step)
        if values is None:
            return [], {}
        ranked = values.sort_values(ascending=not up, kind="stable")
        return [int(i) for i in ranked.index[:n]], {}
    if spec.detector == "garbled":
        with handle.read() as store:
            return queries.top_garbled(store, store.run_id(run), step, n), {}
    if spec.detector == "logged_gap":
        with handle.read() as store:
            return queries.top_logged_gap(store, store.run_id(run), key, step, n), {}
    where = (f"step={step}", *spec.where)
    per_group = spec.detector == "zero_variance"  # a whole group shows it: one rollout of each
    descending = up and not per_group
    filters = tuple(explorer.parse_where(w) for w in where)
    query = ExplorerQuery(
        estimator=estimator,
        config=config,
        sort=spec.sort,
        descending=descending,
        filters=filters,
        limit=None if per_group else n,
    )
    rows = explorer.rollout_table(handle, run, query, prepare_missing=False).rows
    if per_group:
        rows = rows.drop_duplicates("group_id")
    return [int(i) for i in rows["rollout_id"][:n]], {
        "where": list(where),
        "sort": ("-" if descending else "") + spec.sort,
    }


class LiveMonitor:
    """The monitors over a run that grows (`creditlens import --follow --monitor`): `update()` reruns them
    and returns the alerts not returned before — a new onset, or a known one whose severity rose (a
    pending `info` confirmed as `warn` or `alert`)."""

    def __init__(
        self,
        handle: StoreHandle,
        run: str,
        estimator: str = "grpo",
        config: tuple = (),
        settings: MonitorSettings = MonitorSettings(),
    ):
        self.handle, self.run, self.estimator = handle, run, estimator
        self.config, self.settings = config, settings
        self._seen: dict[tuple[str, str, int], int] = {}  # (detector, statistic, step) -> severity index

    def update(self) -> list[Alert]:
        report = run_monitors(self.handle, self.run, self.estimator, self.config, self.settings)
        fresh = []
        for a in report.alerts:
            key, level = (a.detector, a.statistic, a.step), SEVERITIES.index(a.severity)
            if level > self._seen.get(key, -1):
                self._seen[key] = level
                fresh.append(a)
        return fresh
