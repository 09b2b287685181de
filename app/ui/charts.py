"""Charts beside the token views: the waterfall of channel contributions, rank agreement, credit mass by
token class, shares per channel, the prefix tree, the dual-ascent replay, V̂ along a rollout, oracle
metrics and the trends over steps. Plain arrays/DataFrames in, `go.Figure` out; names are escaped."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.ui.fmt import safe
from app.ui.scales import DIVERGING, symmetric_range


def contribution_waterfall(contributions: dict[str, float], final: float, title: str = "") -> go.Figure:
    """The final advantage of one token as the sum of its channel contributions β_c · Ã_c."""
    names = [safe(n) for n in contributions]
    values = [float(v) for v in contributions.values()]
    fig = go.Figure(
        go.Waterfall(
            x=names + ["final A"],
            y=values + [float(final)],
            measure=["relative"] * len(values) + ["total"],
            text=[f"{v:+.3f}" for v in values + [float(final)]],
            textposition="outside",
            increasing={"marker": {"color": "#2166ac"}},
            decreasing={"marker": {"color": "#b2182b"}},
            totals={"marker": {"color": "#555555"}},
        )
    )
    fig.update_layout(
        height=320,
        title=safe(title) if title else None,
        showlegend=False,
        margin={"l": 10, "r": 10, "t": 40 if title else 10, "b": 10},
    )
    return fig


def rank_agreement_figure(matrix: pd.DataFrame) -> go.Figure:
    """Spearman correlation between estimators, as an annotated matrix on [-1, 1]."""
    labels = [safe(n) for n in matrix.index]
    values = matrix.to_numpy(dtype=np.float64)
    text = [["–" if not np.isfinite(v) else f"{v:.2f}" for v in row] for row in values]
    fig = go.Figure(
        go.Heatmap(
            z=values,
            x=labels,
            y=labels,
            text=text,
            texttemplate="%{text}",
            colorscale=DIVERGING,
            zmin=-1,
            zmax=1,
            zmid=0,
            colorbar={"title": {"text": "ρ"}, "thickness": 12},
        )
    )
    fig.update_yaxes(autorange="reversed")
    fig.update_layout(height=120 + 45 * len(labels), margin={"l": 10, "r": 10, "t": 10, "b": 10})
    return fig


# Series colours (estimators in the class-mass bars, channels in Tune's replay): Dark2 without red or blue,
# which mean the sign of credit.
SERIES_COLOURS = ("#1b9e77", "#d95f02", "#7570b3", "#66a61e", "#e6ab02", "#a6761d")


def token_share_marks(classes, token_share) -> go.Scatter:
    """The dash at each token class's share of tokens, drawn over its credit-share bars."""
    return go.Scatter(
        x=[safe(c) for c in classes],
        y=token_share,
        mode="markers",
        marker={"symbol": "line-ew-open", "size": 24, "line": {"width": 3}, "color": "#333"},
        name="share of tokens",
    )


def signed_mass_figure(frame: pd.DataFrame) -> go.Figure:
    """Credit and penalty per token class and estimator (`credit_shares.signed_mass_by_class`): one row of
    bars per class, an estimator's credit (A > 0) to the right of 0 and its penalty (A < 0) to the left,
    both as shares of its Σ|A|, each bar labelled with its number; the class's share of tokens in its
    label. The legend sits under the plot, never over a bar."""
    fig = go.Figure()
    classes = list(dict.fromkeys(frame["token_class"]))
    tokens = frame.drop_duplicates("token_class").set_index("token_class")["token_share"]
    label = {c: f"{safe(c)} ({tokens[c]:.0%} of tokens)" for c in classes}
    estimators = list(dict.fromkeys(frame["estimator"]))
    for i, name in enumerate(estimators):
        part = frame[frame["estimator"] == name]
        colour = SERIES_COLOURS[i % len(SERIES_COLOURS)]  # never red/blue: those mean the credit's sign
        for column, sign in (("credit_share", 1.0), ("penalty_share", -1.0)):
            values = [sign * float(v) if np.isfinite(v) else 0.0 for v in part[column]]
            fig.add_trace(
                go.Bar(
                    y=[label[c] for c in part["token_class"]],
                    x=values,
                    orientation="h",
                    name=safe(name) if sign > 0 else f"{safe(name)} · penalty",  # the legend names the first
                    legendgroup=safe(name),
                    showlegend=sign > 0,
                    offsetgroup=str(i),  # credit and penalty share the estimator's slot, on either side of 0
                    marker={"color": colour, "pattern": {"shape": "" if sign > 0 else "/"}},
                    text=[f"{v:+.0%}".replace("-", "−") if abs(v) >= 0.005 else "" for v in values],
                    textposition="outside",
                    cliponaxis=False,
                    textfont={"size": 10},
                    hovertemplate=f"{safe(name)} · %{{y}}<br>{'credit' if sign > 0 else 'penalty'} "
                    "%{x:.1%} of Σ|A|<extra></extra>",
                )
            )
    widest = float(np.nanmax(frame[["credit_share", "penalty_share"]].to_numpy(), initial=0.0))
    reach = max(widest * 1.3, 0.05)  # room for the numbers beside the longest bars
    fig.add_vline(x=0, line={"color": "#333", "width": 1})
    fig.update_layout(
        barmode="group",
        height=90 + len(classes) * max(len(estimators), 1) * 15,
        xaxis={
            "title": "← penalty (A < 0) · share of Σ|A| · credit (A > 0) →",
            "tickformat": ".0%",
            "range": [-reach, reach],
            "zeroline": False,
        },
        yaxis={"autorange": "reversed", "automargin": True},
        margin={"l": 10, "r": 10, "t": 10, "b": 80},
        # under the axis title, in the figure's bottom margin: it covers no bar
        legend={"orientation": "h", "yref": "container", "y": 0.0, "yanchor": "bottom", "x": 0},
        bargap=0.25,
    )
    return fig


def shares_figure(shares: dict[str, float], title: str = "share of |A| per channel") -> go.Figure:
    names = [safe(n) for n in shares]
    values = [0.0 if not np.isfinite(v) else float(v) for v in shares.values()]
    fig = go.Figure(
        go.Bar(
            x=values,
            y=names,
            orientation="h",
            text=[f"{v:.0%}" for v in values],
            textposition="auto",
            marker={"color": "#4575b4"},
        )
    )
    fig.update_layout(
        height=80 + 32 * len(names),
        title=title,
        xaxis={"tickformat": ".0%", "range": [0, 1]},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
    )
    fig.update_yaxes(autorange="reversed")
    return fig


def prefix_tree_figure(frame: pd.DataFrame, zmax: float | None = None) -> go.Figure:
    """The group's prefix tree as an icicle: width = responses through a node, colour = V(u)."""
    peak = zmax if zmax is not None else symmetric_range(frame["value"].to_numpy())
    ids = [str(i) for i in frame["node_id"]]
    parents = ["" if pd.isna(p) else str(int(p)) for p in frame["parent"]]
    labels = [safe(label) for label in frame["label"]]
    hover = [
        f"{safe(r.label)}<br>tokens [{r.start}, {r.end})<br>responses {r.count}<br>V(u) {r.value:+.3f}"
        + ("<br><b>branch point</b>" if r.branches else "")
        + (f"<br>TD {r.td:+.3f}" if r.td else "")
        for r in frame.itertuples()
    ]
    fig = go.Figure(
        go.Icicle(
            ids=ids,
            parents=parents,
            labels=labels,
            values=frame["count"],
            branchvalues="total",
            hovertext=hover,
            hoverinfo="text",
            textinfo="label",
            marker={
                "colors": frame["value"],
                "colorscale": DIVERGING,
                "cmid": 0,
                "cmin": -peak,
                "cmax": peak,
                "showscale": True,
                "colorbar": {"title": {"text": "V(u)"}, "thickness": 12},
            },
            tiling={"orientation": "v"},
            maxdepth=8,
        )
    )
    fig.update_layout(height=460, margin={"l": 10, "r": 10, "t": 10, "b": 10})
    return fig


def step_tick(steps) -> int:
    """An integer tick spacing showing at most about 10 steps."""
    span = int(np.nanmax(steps) - np.nanmin(steps)) if len(steps) else 0
    return max(1, math.ceil(span / 10))


def value_estimates_figure(values: pd.DataFrame, length: int, outcome: float | None = None) -> go.Figure:
    """V̂(s_t) ± standard error at the resampled positions along the rollout, and the observed outcome."""
    fig = go.Figure(
        go.Scatter(
            x=values["pos"],
            y=values["value"],
            error_y={"type": "data", "array": values["stderr"], "visible": True},
            mode="markers+lines",
            name="V̂(s_t) ± s.e.",
            hovertemplate="pos %{x}<br>V̂ %{y:.3f}<extra></extra>",
        )
    )
    if outcome is not None:
        fig.add_trace(
            go.Scatter(
                x=[length],
                y=[outcome],
                mode="markers",
                name="observed outcome",
                marker={"symbol": "star", "size": 12, "color": "#b2182b"},
            )
        )
    fig.update_layout(
        height=320,
        xaxis={"title": "position", "range": [-1, max(length, 1) + 1]},
        yaxis={"title": "reward"},
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
    )
    return fig


def oracle_metrics_figure(frame: pd.DataFrame, metrics: Sequence[str], error: str = "_std") -> go.Figure:
    """One bar group per metric, one bar per estimator (frame: estimator + metric columns, + the error
    bar columns named metric + `error`)."""
    fig = go.Figure()
    for row in frame.itertuples(index=False):
        d = row._asdict()
        fig.add_trace(
            go.Bar(
                x=list(metrics),
                y=[d.get(m) for m in metrics],
                name=safe(d["estimator"]),
                error_y={
                    "type": "data",
                    "array": [_bar(d.get(f"{m}{error}")) for m in metrics],
                    "visible": True,
                },
            )
        )
    fig.update_layout(
        barmode="group", height=380, margin={"l": 10, "r": 10, "t": 10, "b": 10}, legend={"orientation": "h"}
    )
    return fig


# ---- trends over steps (one row per step from backend.views.explorer.step_trends) --------------------------

TREND_HEIGHT = 336  # the plot keeps its height under the title band (margin top 76)


def _trend_layout(fig: go.Figure, title: str, steps: pd.Series, yaxis: dict | None = None) -> go.Figure:
    fig.update_layout(
        # the title sits just above the plot, under the toolbar (which takes the top of the figure and used to
        # cover a long title's end); the "no data" note and the alert marks fit between title and plot
        title={
            "text": title,
            "x": 0,
            "xref": "paper",
            "xanchor": "left",
            "y": 1,
            "yref": "paper",
            "yanchor": "bottom",
            "pad": {"b": 20},
        },
        height=TREND_HEIGHT,
        # whole steps, at most about 10 labels: a tick per step drew (and measured) every label of a long
        # run, 150 steps x 9 charts took Trends 14.7 s to draw
        xaxis={"title": "step", "tickformat": "d", "dtick": step_tick(steps)},
        yaxis=yaxis or {},
        margin={"l": 10, "r": 10, "t": 76, "b": 10},
        # below the axis title, growing downwards: a legend of two or three rows never covers "step"
        legend={"orientation": "h", "y": -0.3, "yanchor": "top"},
        hovermode="x unified",
    )
    return fig


MARKED_STEPS = 40  # a marker per step up to this many; beyond, markers hide the line and slow the draw


def line_mode(steps: pd.Series) -> str:
    return "lines+markers" if len(steps) <= MARKED_STEPS else "lines"


PERCENT_TICKS = ".3~p"  # percent with 3 significant digits: a 0.2% repetition rate reads 0.2%, not 0%


def trend_lines(frame: pd.DataFrame, columns: dict[str, str], title: str, percent: bool = False) -> go.Figure:
    """One line per column over steps. columns: column -> legend label (channel names are escaped). A column
    with no value at any step (unknown for this run, e.g. truncation a log does not record) gets no legend
    entry of its own; the legend says "<label>: no data in this run" instead."""
    fig = go.Figure()
    empty = []
    for column, label in columns.items():
        if column not in frame.columns:
            continue
        values = frame[column].astype(float)
        if values.isna().all():
            empty.append(safe(label))
            continue
        fig.add_trace(go.Scatter(x=frame["step"], y=values, mode=line_mode(frame["step"]), name=safe(label)))
    for label in empty:  # in the legend, where its line would be (under the title it read as the title's)
        fig.add_trace(
            go.Scatter(
                x=list(frame["step"].iloc[:1]),  # a step with no value: nothing drawn, the alert marks read x
                y=[None] * min(len(frame), 1),
                mode="lines",
                name=f"{label}: no data in this run",
                line={"color": "#999999", "dash": "dot"},
                hoverinfo="skip",
            )
        )
    fig.update_layout(showlegend=True)  # one line is named too (Plotly hides a lone trace's legend)
    return _trend_layout(fig, title, frame["step"], {"tickformat": PERCENT_TICKS} if percent else None)


def class_share_trend(
    frame: pd.DataFrame, columns: dict[str, str], title: str = "credit share by token class"
) -> go.Figure:
    """Share of Σ|A| per token class over steps, a line per class (a rising `filler` line is the trend to
    watch). A step without credit (Σ|A| = 0: its share is undefined) is a gap in every line, never 0 (a
    stacked area drew it as 0). columns: share column -> class name."""
    fig = go.Figure()
    for column, label in columns.items():
        fig.add_trace(
            go.Scatter(
                x=frame["step"],
                y=frame[column].astype(float),
                name=safe(label),
                mode=line_mode(frame["step"]),
                connectgaps=False,
                customdata=[[column]] * len(frame),  # a click opens the step sorted by this share (drill.py)
                hovertemplate=f"{safe(label)}: %{{y:.1%}} at step %{{x}}<extra></extra>",
            )
        )
    fig = _trend_layout(
        fig,
        title,
        frame["step"],
        {"title": "share of Σ|A| (credit and penalty)", "tickformat": ".0%", "range": [0, 1]},
    )
    return fig.update_layout(hovermode="closest")  # a click picks the class under the pointer


def reward_bubbles(histogram: pd.DataFrame, title: str = "reward per step (a dot per bin)") -> go.Figure:
    """The reward histogram of each step (`creditlens histogram`): a dot per step and bin at the bin's middle,
    its area the bin's count; customdata: the bin's Explorer filter (a click opens its rollouts)."""
    middle = (histogram["low"] + histogram["high"]) / 2
    largest = max(int(histogram["rollouts"].max()), 1) if len(histogram) else 1
    fig = go.Figure(
        go.Scatter(
            x=histogram["step"],
            y=middle,
            mode="markers",
            marker={
                "size": (histogram["rollouts"] / largest) ** 0.5 * 22 + 4,
                "color": "#4477aa",
                "opacity": 0.7,
            },
            customdata=histogram[["where", "label", "rollouts"]].to_numpy(),
            hovertemplate="step %{x} · reward %{customdata[1]}: %{customdata[2]} rollouts<extra></extra>",
            showlegend=False,
        )
    )
    fig = _trend_layout(fig, title, histogram["step"], {"title": "reward (sum of the channels)"})
    return fig.update_layout(hovermode="closest")


def quantile_band(frame: pd.DataFrame) -> go.Figure:
    """The advantage distribution per step: q05–q95 and q25–q75 bands around the median."""
    fig = go.Figure()
    step = frame["step"]
    for low, high, label, alpha in (("q05", "q95", "5–95%", 0.15), ("q25", "q75", "25–75%", 0.35)):
        fig.add_trace(
            go.Scatter(
                x=step,
                y=frame[high].astype(float),
                mode="lines",
                line={"width": 0},
                showlegend=False,
                hoverinfo="skip",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=step,
                y=frame[low].astype(float),
                mode="lines",
                line={"width": 0},
                fill="tonexty",
                fillcolor=f"rgba(69,117,180,{alpha})",
                name=label,
            )
        )
    fig.add_trace(
        go.Scatter(
            x=step,
            y=frame["q50"].astype(float),
            mode=line_mode(step),
            name="median",
            line={"color": "#4575b4"},
        )
    )
    return _trend_layout(fig, "advantage quantiles over tokens", step)


def _bar(value) -> float:
    return 0.0 if value is None or value != value else float(value)
