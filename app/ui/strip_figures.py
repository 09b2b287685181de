"""Thin figures along a response: the whole-response overview strip that marks the drawn window, and the
per-token strips (logprob, reference logprob, log-ratios, entropy, value, new/old ratio)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from app.ui.fmt import safe
from app.ui.scales import DIVERGING, symmetric_range


def overview_strip(
    values: np.ndarray, start: int, stop: int, peak: float | None = None, bins: int = 256
) -> go.Figure:
    """The whole response as one thin row (long responses binned: each bin shows its largest |A|) with the
    window [start, stop) outlined, so a reader sees where the drawn tokens sit."""
    values = np.asarray(values, dtype=np.float64)
    L = len(values)
    n = max(1, min(bins, L))
    edges = np.linspace(0, L, n + 1).round().astype(int)
    shown = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        part = values[a : max(b, a + 1)]
        finite = part[np.isfinite(part)]
        shown.append(float(finite[np.argmax(np.abs(finite))]) if finite.size else np.nan)
    peak = peak if peak is not None else symmetric_range(values)
    fig = go.Figure(
        go.Heatmap(
            z=[shown],
            x=edges.tolist(),
            y=[-0.5, 0.5],
            colorscale=DIVERGING,
            zmin=-peak,
            zmax=peak,
            zmid=0,
            showscale=False,
            hovertemplate="tokens %{x}<br>A %{z:+.3f}<extra></extra>",
        )
    )
    fig.add_shape(
        type="rect",
        x0=start,
        x1=stop,
        y0=-0.5,
        y1=0.5,
        line={"color": "#111111", "width": 2},
        fillcolor="rgba(0,0,0,0)",
        name="window",
    )
    fig.update_xaxes(
        range=[0, max(L, 1)], showgrid=False, zeroline=False, tickformat="d", tickfont={"size": 9}
    )
    fig.update_yaxes(visible=False)
    fig.update_layout(
        height=60,
        margin={"l": 10, "r": 10, "t": 4, "b": 20},
        dragmode=False,
        title=None,
        plot_bgcolor="rgba(0,0,0,0)",
    )
    return fig


def token_strips_figure(
    strips: dict[str, np.ndarray],
    tokens: Sequence[str],
    *,
    offset: int = 0,
    dimmed: np.ndarray | None = None,
    highlight: int | None = None,
) -> go.Figure:
    """Per-token strips (logprob, ref logprob, log-ratios, entropy, value, ratio) as bars over the same
    positions, one small panel each; loss-masked tokens (`dimmed`) drawn faded, never hidden."""
    names = list(strips)
    fig = make_subplots(rows=max(len(names), 1), cols=1, shared_xaxes=True, vertical_spacing=0.02)
    L = len(tokens)
    x = np.arange(offset, offset + L)
    label = [safe(repr(t)[1:-1]) for t in tokens]
    opacity = [0.25 if dimmed is not None and t < len(dimmed) and dimmed[t] else 0.9 for t in range(L)]
    for i, name in enumerate(names):
        values = np.asarray(strips[name], dtype=np.float64)[:L]
        fig.add_trace(
            go.Bar(
                x=x,
                y=values,
                customdata=label,
                marker={"color": "#4d6a8a", "opacity": opacity},
                hovertemplate=f"<b>%{{customdata}}</b> · pos %{{x}}<br>{safe(name)} %{{y:+.3f}}"
                "<extra></extra>",
                name=safe(name),
                showlegend=False,
            ),
            row=i + 1,
            col=1,
        )
        fig.update_yaxes(
            title={"text": safe(name), "font": {"size": 10}}, row=i + 1, col=1, tickfont={"size": 9}, nticks=3
        )
        if highlight is not None and offset <= highlight < offset + L:
            fig.add_vline(x=highlight, line={"color": "#111111", "width": 1, "dash": "dot"}, row=i + 1, col=1)
    fig.update_xaxes(tickformat="d", showgrid=False)
    fig.update_layout(
        height=60 + 70 * max(len(names), 1),
        bargap=0.05,
        margin={"l": 10, "r": 10, "t": 10, "b": 10},
        dragmode=False,
    )
    return fig
