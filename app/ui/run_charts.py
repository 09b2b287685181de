"""Figures of runs side by side: one trace per run, named by the run, the EMA-smoothed line over the raw
points drawn faint in the same colour (Tinker's and TensorBoard's convention); each run its own dash and
marker, and a hover that lists every run's value at the step."""

from __future__ import annotations

import pandas as pd
import plotly.express as px
import plotly.graph_objects as go

from app.ui.charts import PERCENT_TICKS, _trend_layout, line_mode
from app.ui.fmt import safe

RUN_COLOURS = px.colors.qualitative.D3
RAW_OPACITY = 0.25
# Each run's line has its own dash and marker as well as its colour: two runs whose lines coincide (the same
# data, a setting apart) still show both, the later one's marks over the first's line.
RUN_DASHES = ("solid", "dash", "dot", "dashdot")
RUN_MARKERS = ("circle", "square", "diamond", "cross")


def run_colour(runs: list[str], run: str) -> str:
    return RUN_COLOURS[runs.index(run) % len(RUN_COLOURS)]


def run_style(runs: list[str], run: str) -> tuple[str, str]:
    """(dash, marker symbol) of the run's line."""
    i = runs.index(run)
    return RUN_DASHES[i % len(RUN_DASHES)], RUN_MARKERS[i % len(RUN_MARKERS)]


def runs_trend(
    raw: pd.DataFrame,
    smooth: pd.DataFrame,
    column: str,
    title: str,
    percent: bool = False,
    alerts: pd.DataFrame | None = None,
    x: str = "step",
) -> go.Figure:
    """`column` over steps, a smoothed line per run (legend: the run's name, escaped) over its raw values as
    faint points; a run without any value of `column` is named in the legend as having no data. Each run's
    rows of `alerts` (`creditlens compare-runs --alerts`) are marked ▼ on its line at their steps. x: the
    column of the x axis, "step" or "tokens_seen" (the response tokens up to the step: runs of different
    batch sizes or lengths side by side)."""
    fig = go.Figure()
    runs = list(dict.fromkeys(raw["run"]))
    for run in runs:
        colour = run_colour(runs, run)
        mine_raw, mine = raw[raw["run"] == run], smooth[smooth["run"] == run]
        values = mine_raw[column].astype(float) if column in mine_raw else pd.Series(dtype=float)
        if values.isna().all():
            grey = {"color": "#999999", "dash": "dot"}
            fig.add_trace(go.Scatter(x=[], y=[], mode="lines", name=f"{safe(run)}: no data", line=grey))
            continue
        fig.add_trace(
            go.Scatter(
                x=mine_raw[x],
                y=values,
                mode="markers+lines",
                marker={"size": 5, "color": colour},
                line={"width": 1, "color": colour},
                opacity=RAW_OPACITY,
                name=f"{safe(run)} (raw)",
                legendgroup=run,
                showlegend=False,
                hoverinfo="skip",
            )
        )
        dash, symbol = run_style(runs, run)
        value = PERCENT_TICKS if percent else ".4~g"
        fig.add_trace(
            go.Scatter(
                x=mine[x],
                y=mine[column].astype(float),
                mode=line_mode(mine[x]),
                line={"width": 2.5, "color": colour, "dash": dash},
                marker={"symbol": symbol, "size": 8, "color": colour},
                name=safe(run),
                legendgroup=run,
                connectgaps=False,
                # the unified hover (every run's value at the step) names each run
                hovertemplate=f"%{{fullData.name}}: %{{y:{value}}}<extra></extra>",
            )
        )
        if alerts is not None:
            _mark_alerts(fig, mine, column, alerts[alerts["run"] == run], run, colour, x)
    fig.update_layout(showlegend=True)
    yaxis = {"tickformat": PERCENT_TICKS} if percent else None
    fig = _trend_layout(fig, safe(title), raw["step"] if len(raw) else pd.Series([0]), yaxis)
    if x == "tokens_seen":
        fig.update_xaxes(title="response tokens seen", tickformat="~s", dtick=None)
    return fig


def _mark_alerts(
    fig: go.Figure,
    line: pd.DataFrame,
    column: str,
    alerts: pd.DataFrame,
    run: str,
    colour: str,
    x: str = "step",
):
    """▼ on the run's smoothed line at each step with a warning (steps where the line has no value are left
    out), placed on the x axis `x`; the hover names the run, the step and each warning there, escaped."""
    at = line.set_index(line["step"].astype(int))[column].astype(float)
    place = line.set_index(line["step"].astype(int))[x]
    steps = [int(s) for s in dict.fromkeys(alerts["step"]) if int(s) in at.index and pd.notna(at[int(s)])]
    if not steps:
        return
    hover = [
        f"{safe(run)} · step {s}<br>"
        + "<br>".join(
            f"{safe(a.severity)}: {safe(a.detector)} ({safe(a.statistic)})"
            for a in alerts[alerts["step"] == s].itertuples()
        )
        for s in steps
    ]
    fig.add_trace(
        go.Scatter(
            x=[place[s] for s in steps],
            y=[at[s] for s in steps],
            mode="markers",
            marker={
                "symbol": "triangle-down",
                "size": 12,
                "color": colour,
                "line": {"width": 1.5, "color": "#d55e00"},
            },
            name=f"{safe(run)} warnings",
            legendgroup=run,
            showlegend=False,
            hovertext=hover,
            hoverinfo="text",
        )
    )
