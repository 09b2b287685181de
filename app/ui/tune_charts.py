"""The Tune view's run-level figures: the dual-ascent replay (β and violation rate per
logged step and channel, against τ and each channel's threshold) and a β's effect on the whole run (channel
and class shares of |A| before and after, over the run and per step). Frames from backend/views/tune.py in,
`go.Figure` out; names are escaped. Colours, step ticks, line modes and the token-share dash are
`app.ui.charts`' own, so Tune's figures read like the other views'."""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.ui.charts import SERIES_COLOURS, line_mode, step_tick, token_share_marks
from app.ui.fmt import safe

BEFORE, AFTER = "#9e9e9e", "#1b9e77"  # grey and green: never red/blue, which mean negative/positive credit


def _steps_axis(fig: go.Figure, steps) -> None:
    """x on the logged steps only (integers, no step before the first)."""
    steps = sorted({int(s) for s in steps})
    if steps:
        pad = 0.5 if len(steps) > 1 else 1.0
        fig.update_xaxes(range=[steps[0] - pad, steps[-1] + pad], tickformat="d", dtick=step_tick(steps))


def replay_figure(frame: pd.DataFrame, start: dict[str, float]) -> go.Figure:
    """β_c after each step's update (top, the start β as a dotted line) and the violation rate against τ_c
    (bottom). frame: rows (step, channel, violation_rate, beta, tau, threshold)."""
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, subplot_titles=("β per channel", "violation rate vs τ")
    )
    for i, (channel, part) in enumerate(frame.groupby("channel", sort=False)):
        color, name = SERIES_COLOURS[i % len(SERIES_COLOURS)], safe(channel)
        mode = line_mode(part["step"])
        fig.add_trace(
            go.Scatter(
                x=part["step"], y=part["beta"], mode=mode, name=name, line={"color": color}, legendgroup=name
            ),
            row=1,
            col=1,
        )
        if channel in start:
            fig.add_trace(
                go.Scatter(
                    x=[part["step"].min(), part["step"].max()],
                    y=[start[channel]] * 2,
                    mode="lines",
                    line={"color": color, "dash": "dot", "width": 1},
                    name=f"{name}: start β",
                    legendgroup=name,
                    showlegend=False,
                ),
                row=1,
                col=1,
            )
        threshold = part["threshold"].iloc[0]
        fig.add_trace(
            go.Scatter(
                x=part["step"],
                y=part["violation_rate"],
                mode=mode,
                name=f"{name} rate (score < {threshold:g})",
                line={"color": color},
                legendgroup=name,
                showlegend=False,
            ),
            row=2,
            col=1,
        )
        fig.add_trace(
            go.Scatter(
                x=part["step"],
                y=part["tau"],
                mode="lines",
                name=f"τ {name}",
                line={"color": color, "dash": "dash"},
                legendgroup=name,
                showlegend=False,
            ),
            row=2,
            col=1,
        )
    fig.update_layout(height=440, margin={"l": 10, "r": 10, "t": 30, "b": 10})
    fig.update_yaxes(rangemode="tozero")
    fig.update_yaxes(range=[0, 1.02], tickformat=".0%", row=2, col=1)
    fig.update_xaxes(title="step", row=2, col=1)
    _steps_axis(fig, frame["step"])
    return fig


def effect_figure(frame: pd.DataFrame) -> go.Figure:
    """Over the whole run, before (the default β) and after: each channel's share of Σ|β_c Ã_c| (left) and
    each token class's share of Σ|A_final| with its share of tokens (right, the dash)."""
    whole = frame[frame["step"].isna()]
    fig = make_subplots(
        rows=1,
        cols=2,
        column_widths=[0.4, 0.6],
        subplot_titles=("share of |A| per channel", "share of |A_final| per token class"),
    )
    for col, kind in ((1, "channel"), (2, "class")):
        part = whole[whole["kind"] == kind]
        for which, color in (("before", BEFORE), ("after", AFTER)):
            rows = part[part["which"] == which]
            fig.add_trace(
                go.Bar(
                    x=[safe(n) for n in rows["name"]],
                    y=rows["share"],
                    name=which,
                    marker={"color": color},
                    legendgroup=which,
                    showlegend=col == 1,
                    text=[f"{v:.0%}" if np.isfinite(v) else "" for v in rows["share"]],
                    textposition="outside",
                ),
                row=1,
                col=col,
            )
    classes = whole[(whole["kind"] == "class") & (whole["which"] == "before")]
    fig.add_trace(token_share_marks(classes["name"], classes["token_share"]), row=1, col=2)
    fig.update_layout(
        barmode="group",
        height=380,
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.25},
    )
    fig.update_yaxes(tickformat=".0%", rangemode="tozero")
    fig.update_xaxes(tickangle=-30, automargin=True)
    return fig


def effect_steps_figure(frame: pd.DataFrame) -> go.Figure:
    """Each channel's share of |A| per step, before (dotted) and after (solid)."""
    steps = frame[frame["step"].notna() & (frame["kind"] == "channel")]
    fig = go.Figure()
    for i, (channel, part) in enumerate(steps.groupby("name", sort=False)):
        color, name = SERIES_COLOURS[i % len(SERIES_COLOURS)], safe(channel)
        for which, dash in (("before", "dot"), ("after", "solid")):
            rows = part[part["which"] == which]
            fig.add_trace(
                go.Scatter(
                    x=rows["step"].astype(int),
                    y=rows["share"],
                    mode=line_mode(rows["step"]),
                    name=f"{name} ({which})",
                    line={"color": color, "dash": dash},
                    legendgroup=name,
                )
            )
    fig.update_layout(
        height=300,
        title="share of |A| per channel and step (dotted: before, solid: after)",
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        yaxis={"tickformat": ".0%"},
    )
    fig.update_xaxes(title="step")
    _steps_axis(fig, steps["step"].astype(int))
    return fig
