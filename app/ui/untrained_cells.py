"""Untrained tokens in a heatmap (agent runs): a tool's or an environment's tokens (loss mask 0) are never
credited, so their cells are not coloured by a 0 but drawn grey by a layer of their own, whose hover says
"not trained". Every token heatmap (`heatmaps.credit_heatmap`: Rollout, Compare, Group, same prompt) takes
the mask and draws them here."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from app.ui.fmt import safe, visible_token

UNTRAINED_COLOURS = ("#e6e6e6", "#6b6b6b")
"""Background and text of a token the trainer does not train (grey: no credit, not a zero of the scale)."""
NOT_TRAINED = "not trained"
"""What a hover says in place of an untrained token's value."""


def per_row(names: list[str], untrained: dict[str, np.ndarray] | np.ndarray | None) -> dict[str, np.ndarray]:
    """Each row's untrained tokens: `untrained` as given (row -> (L,) bool), or one (L,) bool for every
    row of `names` (the rows of one rollout: Rollout, Compare); {} when none is untrained."""
    if untrained is None:
        return {}
    if not isinstance(untrained, dict):
        untrained = same_for_rows(names, untrained)
    return {k: np.asarray(v, dtype=bool) for k, v in untrained.items() if np.any(v)}


def same_for_rows(names: list[str], untrained: np.ndarray | None) -> dict[str, np.ndarray]:
    """One rollout's untrained tokens (L,) bool for each of `names` (its rows)."""
    return {} if untrained is None else {n: np.asarray(untrained, dtype=bool) for n in names}


def blank(values: np.ndarray, untrained: np.ndarray | None) -> np.ndarray:
    """`values` (L,) with NaN (no colour) on the untrained tokens."""
    values = np.asarray(values, dtype=np.float64)
    if untrained is None:
        return values
    off = np.zeros(len(values), dtype=bool)
    n = min(len(values), len(untrained))
    off[:n] = np.asarray(untrained[:n], dtype=bool)
    return np.where(off, np.nan, values)


def band_layer(
    grid, bnd: int, untrained: dict[str, np.ndarray], band: go.Heatmap, hover: bool = True
) -> go.Heatmap:
    """The grey cells of band `bnd` of a `heatmaps` grid, on the band trace's own x and y edges; `hover`:
    they carry the "not trained" hover themselves (False: a marker layer above carries it)."""
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
        hovertemplate=f"%{{customdata[2]}} · pos %{{customdata[0]}} · '%{{customdata[1]}}' · {NOT_TRAINED}"
        "<extra></extra>",
        hoverinfo=None if hover else "skip",
        hoverongaps=False,
        xgap=1,
        ygap=1,
        name=f"not trained, band {bnd}",
    )
