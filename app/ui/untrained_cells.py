"""Untrained tokens in a heatmap (agent runs): a tool's or an environment's tokens (loss mask 0)
are never credited, so their cells are not coloured by a 0 but drawn grey by a layer of their own, whose
hover says "not trained"."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from app.ui.fmt import safe, visible_token

UNTRAINED_COLOURS = ("#e6e6e6", "#6b6b6b")
"""Background and text of a token the trainer does not train (grey: no credit, not a zero of the scale)."""


def blank(values: np.ndarray, untrained: np.ndarray | None) -> np.ndarray:
    """`values` (L,) with NaN (no colour) on the untrained tokens."""
    values = np.asarray(values, dtype=np.float64)
    if untrained is None:
        return values
    off = np.zeros(len(values), dtype=bool)
    n = min(len(values), len(untrained))
    off[:n] = np.asarray(untrained[:n], dtype=bool)
    return np.where(off, np.nan, values)


def band_layer(grid, bnd: int, untrained: dict[str, np.ndarray], band: go.Heatmap) -> go.Heatmap:
    """The grey cells of band `bnd` of a `heatmaps` grid, on the band trace's own x and y edges."""
    members = grid.by_band.get(bnd, [])
    z = np.full((len(grid.names), max(len(members), 1)), np.nan)
    text = np.full(z.shape, "", dtype=object)
    custom = np.full(z.shape, None, dtype=object)
    for r, name in enumerate(grid.names):
        mask, row_text = untrained.get(name), grid.per_row[name]
        for j, t in enumerate(members):
            if mask is None or t >= min(len(mask), len(row_text)) or not mask[t]:
                continue
            z[r, j] = 1.0
            text[r, j] = visible_token(row_text[t], 2 * grid.widths[t])
            custom[r, j] = [grid.offset + t, safe(repr(row_text[t])[1:-1]), safe(name)]
    background, foreground = UNTRAINED_COLOURS
    return go.Heatmap(
        z=z,
        x=band.x,
        y=band.y,
        text=text,
        texttemplate="%{text}",
        textfont={"size": 10, "color": foreground},
        colorscale=[[0, background], [1, background]],
        zmin=0,
        zmax=1,
        showscale=False,
        customdata=custom,
        hovertemplate="%{customdata[2]} · pos %{customdata[0]} · '%{customdata[1]}' · not trained"
        "<extra></extra>",
        hoverongaps=False,
        xgap=1,
        ygap=1,
        name=f"not trained, band {bnd}",
    )
