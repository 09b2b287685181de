"""Token heatmaps and the text view of credit: one row per series (channels, final, true credit, the
estimators of Compare, the responses of Group), cells sized to their token's text, wrapped into bands;
and the response as running text coloured by its advantage."""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from app.ui import untrained_cells
from app.ui.fmt import nice, safe, shown_token, significant, visible_token
from app.ui.scales import BAR_DIGITS, colour_axis, credit_colour, symmetric_range
from app.ui.untrained_cells import UNTRAINED_COLOURS

BAND = 64  # tokens per heatmap line


CELL_TEXT_LIMIT = 12_000  # above this many cells only the last row of each band shows token text
# Hover label of a heatmap cell; customdata = [pos, token, row, value, logprob, entropy, *shares], strings
# escaped and formatted when the figure is built, shares as fractions (the template names them).
HOVER = (
    "<b>%{customdata[1]}</b> · pos %{customdata[0]}<br>%{customdata[2]}: %{customdata[3]}<br>"
    "logprob %{customdata[4]} · entropy %{customdata[5]}"
)


def cell_units(token: str, limit: int = 8) -> int:
    """Width of a token's cell in grid units (one unit fits about two characters; 1 to `limit`)."""
    return int(min(max(1, math.ceil(len(str(token)) / 2)), limit))


def band_cells(widths: Sequence[int], band: int = BAND) -> list[tuple[int, int]]:
    """(band, first column) of each token when cells of `widths` units are packed into bands of `band` units.

    One-unit tokens (a character-level run) give exactly `band` tokens per band."""
    out, bnd, col = [], 0, 0
    for w in widths:
        if col + w > band and col > 0:
            bnd, col = bnd + 1, 0
        out.append((bnd, col))
        col += w
    return out


def band_layout(length: int, n_rows: int, band: int = BAND) -> tuple[int, int]:
    """(number of bands, grid height): bands of `band` tokens, `n_rows` rows each, one blank row between."""
    bands = max(1, math.ceil(length / band))
    return bands, bands * (n_rows + 1) - 1


def heatmap_position(point: dict, n_rows: int, band: int = BAND) -> int | None:
    """The token position of a clicked heatmap cell (from the selection event), or None for a gap."""
    custom = point.get("customdata")
    if isinstance(custom, (list, tuple)) and custom and custom[0] is not None:
        return int(custom[0])
    if isinstance(custom, (int, float)) and not isinstance(custom, bool):
        return int(custom)
    x, y = point.get("x"), point.get("y")
    if x is None or y is None:
        return None
    bnd, row = divmod(int(round(y)), n_rows + 1)
    if row >= n_rows:
        return None
    return bnd * band + int(round(x))


def credit_heatmap(
    rows: dict[str, np.ndarray],
    tokens: Sequence[str],
    *,
    token_info: pd.DataFrame | None = None,
    shares: dict[str, np.ndarray] | None = None,
    band: int = BAND,
    zmax: float | None = None,
    peaks: dict[str, float] | None = None,
    title: str | None = None,
    cell_text: bool | str | None = None,
    row_tokens: dict[str, Sequence[str]] | None = None,
    offset: int = 0,
    clickable: bool = True,
    highlight: Sequence[int] = (),
    untrained: dict[str, np.ndarray] | np.ndarray | None = None,
) -> go.Figure:
    """Token heatmap: one row per named series (channels, final, true credit), wrapped into bands.

    rows: name -> (L,) values per token (NaN: not defined); tokens: L display strings;
    token_info: optional columns `logprob`, `entropy` (L rows) for the hover;
    shares: optional channel -> (L,) share of |A| at each token, shown in the hover;
    row_tokens: optional per-row token text (the Group view: one response per row, L = the longest);
    cell_text: token text in every cell (True), in the last row of each band ("last"), nowhere (False:
    the hover still names the token; text is most of the browser's drawing time), or None: every cell
    up to CELL_TEXT_LIMIT cells, else "last".
    offset: position of the first token shown (a window of a long rollout); positions stay absolute.
    clickable: add the invisible marker layer that makes cells selectable (heatmaps emit no selection
    events); without it the heatmap carries the hover itself.
    highlight: absolute positions outlined across their band (the selected token, the chosen positions).
    peaks: each row's colour half-width (`scale_peaks`); default: one shared max |A| (`zmax` if given).
    untrained: tokens not trained (loss mask 0), row -> (L,) bool or one (L,) bool for every row: grey
    cells whose hover says "not trained" (`untrained_cells`), never a colour of the scale.

    Cells are sized to their token text (`cell_units`, about two characters a unit) and packed into bands
    `band` units wide, so a character-level run has `band` tokens a line and a subword run fewer, each
    readable. Each band is one heatmap trace with cell edges; all share one colour axis in A (the most
    common half-width); a row with another half-width is rescaled onto it and says so in its label.
    The hover shows the true value.
    """
    names = list(rows)
    untrained = untrained_cells.per_row(names, untrained)
    if untrained:  # no colour from their 0: a grey layer (untrained_cells) draws them
        rows = {k: untrained_cells.blank(v, untrained.get(k)) for k, v in rows.items()}
    if cell_text is None:
        cell_text = True if len(tokens) * len(names) <= CELL_TEXT_LIMIT else "last"
    peaks, common = _colour_scale(rows, names, peaks, zmax)
    grid = _grid(names, tokens, row_tokens, band, peaks, common, offset)
    hover = _hover(token_info, shares, grid.L)
    fig = go.Figure()
    points: list[tuple[float, int, list]] = []  # (x, y, customdata) of each cell, for the marker layer
    for bnd in range(grid.n_bands):
        trace, band_points = _band_trace(grid, bnd, rows, cell_text, hover, clickable, untrained)
        fig.add_trace(trace)
        points += band_points
        if untrained:  # with the marker layer the markers carry the hover ("not trained" in its value)
            fig.add_trace(untrained_cells.band_layer(grid, bnd, untrained, trace, hover=not clickable))
    # Heatmaps emit no selection events, so an invisible marker per cell carries hover and clicks.
    # SVG, not WebGL: headless/software-rendered browsers draw it several times faster.
    if clickable:
        fig.add_trace(_token_markers(points, hover.template))
    for pos in highlight:
        _outline(fig, grid, int(pos))
    _lay_out(fig, grid, rows, band, title)
    return fig


@dataclass(frozen=True)
class _Grid:
    """Where each cell of a heatmap sits and how it is coloured.

    names: the rows, top to bottom; per_row: each row's token text; widths: (L,) each position's cell
    width in units; cells: (band, first column) of each position; by_band: band -> its positions;
    peaks: each row's colour half-width; common: the colour axis's; offset: the first position shown."""

    names: list[str]
    per_row: dict[str, list[str]]
    widths: list[int]
    cells: list[tuple[int, int]]
    n_bands: int
    by_band: dict[int, list[int]]
    peaks: dict[str, float]
    common: float
    offset: int

    @property
    def R(self) -> int:
        return len(self.names)

    @property
    def L(self) -> int:
        return len(self.widths)


@dataclass(frozen=True)
class _Hover:
    """What a cell's hover shows beside its row and value: logprob and entropy texts and the channel shares
    (fractions) at each position, and the template that names them."""

    logprobs: list[str]
    entropies: list[str]
    shares: list[list[float]]
    template: str


def _colour_scale(
    rows: dict[str, np.ndarray], names: list[str], peaks: dict[str, float] | None, zmax: float | None
) -> tuple[dict[str, float], float]:
    """Each row's colour half-width (default: one shared max |A|, or `zmax`) and the colour axis's: the
    most common half-width."""
    if peaks is None:
        peak = zmax if zmax is not None else symmetric_range(*[rows[n] for n in names])
        peaks = {n: peak for n in names}
    # the colour axis is in A on the most common half-width; a row on its own scale is rescaled onto it
    # (its label says so), so the z of every other row is its true value
    common = max(set(peaks.values()), key=list(peaks.values()).count) if peaks else 1.0
    return peaks, common


def _grid(
    names: list[str],
    tokens: Sequence[str],
    row_tokens: dict[str, Sequence[str]] | None,
    band: int,
    peaks: dict[str, float],
    common: float,
    offset: int,
) -> _Grid:
    per_row = {n: list(row_tokens[n]) if row_tokens is not None else list(tokens) for n in names}
    L = max((len(v) for v in per_row.values()), default=0) if row_tokens is not None else len(tokens)
    # a position's width: the widest text any row has there (Group rows differ), in units
    widths = [
        max((cell_units(shown_token(per_row[n][t])) for n in names if t < len(per_row[n])), default=1)
        for t in range(L)
    ]
    cells = band_cells(widths, band)
    n_bands = (cells[-1][0] + 1) if cells else 1
    by_band: dict[int, list[int]] = {}
    for t, (bnd, _) in enumerate(cells):
        by_band.setdefault(bnd, []).append(t)
    return _Grid(names, per_row, widths, cells, n_bands, by_band, peaks, common, offset)


def _hover(token_info: pd.DataFrame | None, shares: dict[str, np.ndarray] | None, L: int) -> _Hover:
    lp = [_fmt(v) for v in _column(token_info, "logprob", L)]
    ent = [_fmt(v) for v in _column(token_info, "entropy", L)]
    shares = shares or {}
    share_names = [safe(k).replace("%{", "% {") for k in shares]  # names go into the template itself
    share_cols = [np.round(np.nan_to_num(np.asarray(v, dtype=np.float64)), 2) for v in shares.values()]
    share_values = np.stack(share_cols, axis=1).tolist() if share_cols else [[]] * L
    template = HOVER + "".join(
        ("<br>" if i == 0 else " · ") + f"{n} %{{customdata[{6 + i}]:.0%}}" for i, n in enumerate(share_names)
    )
    template += "<extra></extra>"
    return _Hover(lp, ent, share_values, template)


def _band_trace(
    grid: _Grid,
    bnd: int,
    rows: dict[str, np.ndarray],
    cell_text: bool | str,
    hover: _Hover,
    clickable: bool,
    untrained: dict[str, np.ndarray] | None = None,
) -> tuple[go.Heatmap, list[tuple[float, int, list]]]:
    """Band `bnd` as one heatmap trace (its rows, a cell per position, values on the common scale), and
    the (x, y, customdata) of its cells; an untrained cell's value reads "not trained"."""
    R, members = grid.R, grid.by_band.get(bnd, [])
    cells, widths = grid.cells, grid.widths
    edges = [cells[t][1] - 0.5 for t in members] + (
        [cells[members[-1]][1] + widths[members[-1]] - 0.5] if members else [-0.5, 0.5]
    )
    top = bnd * (R + 1)
    z = np.full((R, max(len(members), 1)), np.nan)
    text = np.full(z.shape, "", dtype=object)
    band_custom = np.full(z.shape, None, dtype=object)
    points = []
    for r, name in enumerate(grid.names):
        values = np.asarray(rows[name], dtype=np.float64)
        label = safe(name)
        row_text = grid.per_row[name]
        off = (untrained or {}).get(name)
        for j, t in enumerate(members):
            if t >= len(row_text):
                continue
            v = values[t] if t < len(values) else np.nan
            z[r, j] = (
                v * (grid.common / grid.peaks[name]) if np.isfinite(v) else np.nan
            )  # on the common scale
            if cell_text is True or (cell_text == "last" and r == R - 1):
                text[r, j] = visible_token(row_text[t], 2 * widths[t])
            band_custom[r, j] = [
                grid.offset + t,
                safe(repr(row_text[t])[1:-1]),
                label,
                untrained_cells.NOT_TRAINED if off is not None and t < len(off) and off[t] else _fmt(v),
                hover.logprobs[t],
                hover.entropies[t],
                *hover.shares[t],
            ]
            points.append((cells[t][1] + (widths[t] - 1) / 2, top + r, band_custom[r, j]))
    trace = go.Heatmap(
        z=z,
        x=edges,
        y=[top + r - 0.5 for r in range(R + 1)],
        text=text,
        texttemplate="%{text}",
        textfont={"size": 10},
        customdata=None if clickable else band_custom,
        hovertemplate=None if clickable else hover.template,
        hoverinfo="skip" if clickable else None,
        hoverongaps=False,
        coloraxis="coloraxis",
        xgap=1,
        ygap=1,
        name=f"band {bnd}",
    )
    return trace, points


def _token_markers(points: list[tuple[float, int, list]], template: str) -> go.Scatter:
    """The invisible marker layer: one square per cell, carrying its hover and its clicks."""
    return go.Scatter(
        x=[x for x, _, _ in points],
        y=[y for _, y, _ in points],
        customdata=[custom for _, _, custom in points],
        hovertemplate=template,
        mode="markers",
        marker={"size": 12, "color": "rgba(0,0,0,0)", "symbol": "square"},
        selected={"marker": {"color": "rgba(0,0,0,0.35)"}},
        unselected={"marker": {"opacity": 1}},
        showlegend=False,
        name="tokens",
    )


def _outline(fig: go.Figure, grid: _Grid, pos: int) -> None:
    """A frame around absolute position `pos` across its band, when it is shown."""
    t = pos - grid.offset
    if 0 <= t < grid.L:
        bnd, col = grid.cells[t]
        top = bnd * (grid.R + 1)
        fig.add_shape(
            type="rect",
            x0=col - 0.5,
            x1=col + grid.widths[t] - 0.5,
            y0=top - 0.5,
            y1=top + grid.R - 0.5,
            line={"color": "#111111", "width": 3},
            fillcolor="rgba(0,0,0,0)",
            layer="above",
            name=f"selected {pos}",
        )


def _lay_out(fig: go.Figure, grid: _Grid, rows: dict[str, np.ndarray], band: int, title: str | None) -> None:
    """Row labels, the figure's size, the per-row scale strips when rows have their own half-widths, and
    the colour axis."""
    names, peaks, common, R = grid.names, grid.peaks, grid.common, grid.R
    tickvals = [b * (R + 1) + r for b in range(grid.n_bands) for r in range(R)]
    starts = {b: grid.by_band[b][0] for b in grid.by_band}
    ticktext = [
        _row_label(n, peaks[n], common) + (f"  [{grid.offset + starts.get(b, 0)}]" if r == 0 else "")
        for b in range(grid.n_bands)
        for r, n in enumerate(names)
    ]
    height = grid.n_bands * (R + 1) - 1
    # When rows have different half-widths (per-row mode, true credit) every row gets its own labelled bar:
    # a strip of three cells (−peak, 0, +peak) at the right end of its row in the first band, coloured as
    # its cells are; the common colour bar is then not needed.
    own = [n for n in names if not np.isclose(peaks[n], common)]
    fig_height = max(140, 22 * height + 50)  # a one-row figure keeps a readable colour bar
    top_margin = 30 if title else 10
    bottom_margin = 10
    plot_height = fig_height - top_margin - bottom_margin
    # rows keep their 22 px when the figure is taller than they need (a one-row figure), at the top
    bottom = max(0.0, 1.0 - 22 * height / plot_height)
    fig.update_yaxes(
        tickvals=tickvals,
        ticktext=ticktext,
        autorange="reversed",
        showgrid=False,
        zeroline=False,
        domain=[bottom, 1.0],
    )
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False, range=[-0.5, band - 0.5])
    if own:
        fig.add_trace(_scale_strips(names, peaks, common, R))
        fig.update_layout(
            xaxis={"domain": [0.0, 1.0 - STRIP - 0.02]},
            xaxis2={
                "domain": [1.0 - STRIP, 1.0],
                "range": [-0.5, 2.5],
                "showticklabels": False,
                "showgrid": False,
                "zeroline": False,
                "fixedrange": True,
            },
        )
    fig.update_layout(
        height=fig_height,
        margin={"l": 10, "r": 10, "t": top_margin, "b": bottom_margin},
        title=safe(title) if title else None,
        clickmode="event+select",
        dragmode=False,
        plot_bgcolor="rgba(0,0,0,0)",
        coloraxis={
            **colour_axis(common, fig_height, "A", _beyond(rows, names, common)),
            "showscale": not own,
        },
    )


STRIP = 0.17  # the width of the per-row scale strips, as a fraction of the figure's plot area


def _scale_strips(names: list[str], peaks: dict[str, float], common: float, R: int) -> go.Heatmap:
    """Each row's own colour bar in the first band: cells −peak, 0, +peak (labelled with the row's numbers,
    coloured on the common axis as the row's cells are rescaled onto it)."""
    ends = [[significant(-peaks[n], BAR_DIGITS), "0", significant(peaks[n], BAR_DIGITS)] for n in names]
    return go.Heatmap(
        z=[[-common, 0.0, common]] * R,
        x=[-0.5, 0.5, 1.5, 2.5],
        y=[r - 0.5 for r in range(R + 1)],
        text=ends,
        texttemplate="%{text}",
        textfont={"size": 9},
        xaxis="x2",
        yaxis="y",
        coloraxis="coloraxis",
        hoverinfo="skip",
        xgap=1,
        ygap=1,
        name="scale strip",
    )


def _beyond(rows: dict[str, np.ndarray], names: list[str], peak: float) -> bool:
    """Whether any value of `names` lies beyond ±peak (a quantile or locked scale clips it)."""
    return any(
        bool(np.any(np.abs(np.asarray(rows[n], dtype=np.float64)[np.isfinite(rows[n])]) > peak * (1 + 1e-9)))
        for n in names
    )


def _row_label(name: str, peak: float, common: float) -> str:
    label = safe(name)
    return label if np.isclose(peak, common) else f"{label} (±{significant(peak, 2, signed=False)})"


def credit_text_html(
    tokens: Sequence[str],
    values: np.ndarray,
    peak: float,
    *,
    offset: int = 0,
    selected: int | None = None,
    facts: Sequence[str] | None = None,
    dimmed: np.ndarray | None = None,
    labels: dict[int, tuple[str, str]] | None = None,
) -> str:
    """The response as running text, each token a span coloured by its value on the diverging scale
    centred at 0 with half-width `peak`; `dimmed` (L,) bool tokens (loss-masked: not trained) are grey and
    say so on hover; `labels` (window position -> (role, label), `app.ui.turns.turn_labels`) open a turn.

    Token text is untrusted: every character goes through `html.escape`. Whitespace stays as written
    (the container uses `white-space: pre-wrap`, so the text wraps like the document); a newline shows
    as ↵ before the break, a tab as ⇥; every span has a hairline edge, so a space token is a visible box.
    Each span carries `data-pos` (absolute position) for clicks and a `title` (hover: position, value and
    `facts[t]`, escaped). `selected` is outlined. Labels are escaped too."""
    parts = []
    for t, token in enumerate(tokens):
        if labels and t in labels:
            role, label = labels[t]
            parts.append(
                f'<span class="turn-label role-{html.escape(role, quote=True)}">{html.escape(label)}</span>'
            )
        v = float(values[t]) if t < len(values) else float("nan")
        untrained = dimmed is not None and t < len(dimmed) and bool(dimmed[t])
        bg, fg = UNTRAINED_COLOURS if untrained else credit_colour(v, peak)
        shown = html.escape(str(token), quote=True)
        shown = shown.replace("\n", '<span class="nl">↵</span>\n')
        shown = shown.replace("\t", '<span class="nl">⇥</span>\t')
        title = f"pos {offset + t} · A {nice(v)}" + (" · not trained" if untrained else "")
        title += f" · {facts[t]}" if facts is not None else ""
        classes = "tok" + (" sel" if selected == offset + t else "") + (" dim" if untrained else "")
        parts.append(
            f'<span class="{classes}" data-pos="{offset + t}" style="background:{bg};color:{fg}" '
            f'title="{html.escape(title, quote=True)}">{shown}</span>'
        )
    return '<div class="credit-text">' + "".join(parts) + "</div>"


def _column(frame: pd.DataFrame | None, name: str, n: int) -> np.ndarray:
    if frame is None or name not in frame.columns:
        return np.full(n, np.nan)
    return np.asarray(frame[name], dtype=np.float64)


def _fmt(v: float) -> str:
    return nice(v)


def small_multiples(
    advantages: dict[str, np.ndarray],
    tokens: Sequence[str],
    band: int = BAND,
    *,
    peaks: dict[str, float] | None = None,
    offset: int = 0,
    untrained: np.ndarray | None = None,
) -> go.Figure:
    """One row per estimator in every band (the rollout wrapped into bands, cells sized to their text), so
    the estimators' credit for a token sits one above the other; one colour axis (`peaks`: per-row or
    shared half-widths, default one shared max |A|). Labels are row ticks: they never overlap. `untrained`
    (L,) bool: the rollout's tokens not trained, grey in every row."""
    return credit_heatmap(
        dict(advantages),
        tokens,
        band=band,
        peaks=peaks,
        offset=offset,
        clickable=False,
        cell_text="last",
        untrained=untrained,
    )
