"""Runs side by side: the trends of several runs in one table, and one summary row per run.

`run_trends` is `creditlens trends --run a --run b ...`, `creditlens.open().trends([...])` and the Trends
view over several runs: each run's rows are exactly `explorer.step_trends` of that run (its single-run
command), with a `run` column first. `summary_row` and `add_config_differences` build the rows of
`creditlens compare-runs` (`backend.monitor.compare_runs`, a layer up because it runs the monitors): per run
its size, last and best mean score per channel, credit shares by token class at its first and last step,
entropy/KL/length at its last step and the trainer configuration keys that differ between the runs.
"""

from __future__ import annotations

import json
import math

import pandas as pd

from backend.core import run_config
from backend.core.errors import InputError
from backend.credit import main_channel
from backend.store import StoreHandle
from backend.views import explorer

LAST_AT_STEP = ("mean_entropy", "kl", "length")
"""The step statistics a comparison row gives at the run's last step (`last_<name>`)."""


def check_runs(runs: list[str] | tuple[str, ...], given_as: str = "--run") -> list[str]:
    """The run names in order; an InputError for none or for a name given twice."""
    runs = [str(r) for r in runs]
    if not runs:
        raise InputError(f"{given_as}: name at least one run")
    seen = set()
    for run in runs:
        if run in seen:
            raise InputError(f"{given_as} {run!r}: given twice; name each run once")
        seen.add(run)
    return runs


def estimator_config(
    handle: StoreHandle,
    run: str,
    estimator: str | None,
    overrides: dict,
    channel: str | None,
    channel_as: str = main_channel.CLI_CHANNEL,
) -> tuple:
    """The (field, value) pairs `run`'s rows are looked up by: the overrides on `channel` (default: that
    run's own main channel), as the single-run command computes them."""
    if estimator is None:
        return tuple(sorted(overrides.items()))
    return main_channel.config_on_channel(handle, run, estimator, overrides, channel, channel_as)


def run_trends(
    handle: StoreHandle,
    runs: list[str] | tuple[str, ...],
    estimator: str | None = None,
    overrides: dict | None = None,
    channel: str | None = None,
    *,
    credit: str = "final",
    channel_as: str = main_channel.CLI_CHANNEL,
) -> pd.DataFrame:
    """One row per run and step: `run`, then each run's `explorer.step_trends` columns (their union, in
    first-seen order; a column another run lacks is empty on this run's rows)."""
    frames = []
    for run in check_runs(runs):
        config = estimator_config(handle, run, estimator, dict(overrides or {}), channel, channel_as)
        frame = explorer.step_trends(handle, run, estimator, config, credit=credit)
        frame.insert(0, "run", run)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True, sort=False)


NOT_SMOOTHED = ("run", "step", "tokens_seen", "rollouts", "groups")
"""Columns `smooth` leaves as they are: the keys and the counts."""


def smooth(frame: pd.DataFrame, weight: float) -> pd.DataFrame:
    """Each numeric column of each run (`run` column; the whole frame when there is none) as its
    exponential moving average over steps, TensorBoard's smoothing with its start debiased: s_t =
    Σ_k w^k·x_{t−k} / Σ_k w^k over the steps with a value (weight w in [0, 1); 0 leaves the values). A step
    without a value stays without one (a gap, not the average carried on)."""
    if not 0 <= weight < 1:
        raise InputError(f"smoothing weight {weight!r}: must be in [0, 1) (0: none, 0.9: heavy)")
    out = frame.copy()
    if weight == 0 or not len(frame):
        return out
    columns = [
        c
        for c in frame.columns
        if c not in NOT_SMOOTHED
        and pd.api.types.is_numeric_dtype(frame[c])
        and not pd.api.types.is_bool_dtype(frame[c])
    ]
    out[columns] = out[columns].astype(float)  # float32 columns (DuckDB's FLOAT) take float64 averages
    groups = frame.groupby("run", sort=False) if "run" in frame.columns else [(None, frame)]
    for _, part in groups:
        values = part[columns].astype(float)
        averaged = values.ewm(alpha=1 - weight, adjust=True, ignore_na=True).mean()  # (steps, columns)
        out.loc[part.index, columns] = averaged.where(values.notna())
    return out


def differing_columns(frame: pd.DataFrame, keys: tuple[str, ...] = ("run",)) -> list[str]:
    """The columns of a comparison whose values are not the same on every row (an empty value differs from
    a number), `keys` left out: what the Runs comparison view highlights."""
    out = []
    for column in frame.columns:
        if column in keys:
            continue
        values = {None if _empty(v) else json.dumps(v, sort_keys=True, default=str) for v in frame[column]}
        if len(values) > 1:
            out.append(column)
    return out


def differing_first(frame: pd.DataFrame, keys: tuple[str, ...] = ("run",)) -> pd.DataFrame:
    """The comparison's columns in reading order: `keys`, the settings that differ between the runs
    (`config.<key>`), the other columns that differ (`differing_columns`), then those the same on every
    run; each part in the order it had. What `creditlens compare-runs` prints (a row per column) and the
    Runs comparison view shows on top."""
    differing = differing_columns(frame, keys)
    settings = [c for c in differing if c.startswith("config.")]
    figures = [c for c in differing if c not in settings]
    same = [c for c in frame.columns if c not in keys and c not in differing]
    return frame[[c for c in keys if c in frame.columns] + settings + figures + same]


def _empty(value) -> bool:
    return value is None or (not isinstance(value, (dict, list, str)) and bool(pd.isna(value)))


def summary_row(run: str, size: dict, trends: pd.DataFrame, meta: dict) -> dict:
    """A comparison row without the monitors' columns: `size` is the run's `list_runs` entry, `trends` its
    `step_trends` (with the estimator whose shares are given), `meta` its run meta (the configuration)."""
    first, last = (trends.iloc[0], trends.iloc[-1]) if len(trends) else (None, None)
    row: dict = {
        "run": run,
        "source": size["source"],
        "steps": size["steps"],
        "rollouts": size["rollouts"],
        "tokens": size["tokens"],
        "first_step": _number(first, "step"),
        "last_step": _number(last, "step"),
    }
    scores = [c for c in trends.columns if c.startswith("score_")]
    for column in scores:
        row[f"last_{column}"] = _number(last, column)
        best = trends[column].max()
        row[f"best_{column}"] = None if pd.isna(best) else float(best)
    for column in [c for c in trends.columns if c.startswith("share_")]:
        row[f"first_{column}"] = _number(first, column)
        row[f"last_{column}"] = _number(last, column)
    for name in LAST_AT_STEP:
        row[f"last_{name}"] = _number(last, name)
    row["config_source"] = meta.get(run_config.SOURCE_KEY)
    row["config"] = run_config.flatten(meta.get(run_config.CONFIG_KEY))
    return row


def add_config_differences(rows: list[dict]) -> None:
    """Add `config.<key>` to every row for each configuration key whose value differs between the rows'
    runs (None where a run lacks it)."""
    configs = {row["run"]: row["config"] for row in rows}
    for key in run_config.differing_keys(configs):
        for row in rows:
            row[f"config.{key}"] = row["config"].get(key)


def _number(series: pd.Series | None, column: str) -> float | int | None:
    """The value of `column` in one trends row as a plain number; None when absent or empty (NaN)."""
    if series is None or column not in series.index:
        return None
    value = series[column]
    if value is None or (isinstance(value, float) and math.isnan(value)) or pd.isna(value):
        return None
    return int(value) if column == "step" else float(value)


SAME_PROMPT_COLUMNS = ("prompt", "run", "step", "group_id", "responses")


def same_prompt(
    handle: StoreHandle,
    runs: list[str] | tuple[str, ...],
    prompt: str | None = None,
    step: int | None = None,
) -> pd.DataFrame:
    """The groups the runs were asked the same prompt in (`creditlens compare-runs --same-prompt`): one row
    per prompt, run, step and group with its number of responses, for the prompts that two or more of the
    runs were asked; prompts in the order the first run met them, then runs in the order given, then steps.
    `prompt` and `step` keep only that prompt's or that step's rows. The Compare view draws one such
    prompt's groups side by side."""
    runs = check_runs(runs)
    frames = []
    with handle.read() as store:
        for run in runs:
            found = store.con.execute(
                "SELECT prompt, step, group_id, count(*) AS responses, min(rollout_id) AS first "
                "FROM rollouts WHERE run_id = ? AND prompt IS NOT NULL "
                "GROUP BY prompt, step, group_id",
                [store.run_id(run)],  # an unknown run: the error lists the known ones
            ).df()
            frames.append(found.assign(run=run, order=len(frames)))
    rows = pd.concat(frames, ignore_index=True)
    shared = rows.groupby("prompt")["run"].nunique()
    rows = rows[rows["prompt"].isin(shared[shared >= 2].index)]
    if prompt is not None:
        rows = rows[rows["prompt"] == prompt]
    if step is not None:
        rows = rows[rows["step"] == int(step)]
    met = rows.sort_values(["order", "first"]).drop_duplicates("prompt")["prompt"].tolist()
    rows = rows.assign(p=rows["prompt"].map({p: i for i, p in enumerate(met)}))
    rows = rows.sort_values(["p", "order", "step", "group_id"])
    frame = rows[list(SAME_PROMPT_COLUMNS)].reset_index(drop=True)
    return frame.astype({"step": "int64", "group_id": "int64", "responses": "int64"})
