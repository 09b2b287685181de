"""Plotly figure builders: plain arrays/DataFrames in, `go.Figure` out (tests call them directly).

Model text is untrusted. Plotly renders a subset of HTML in text and hover labels, so every string
that came from a model or a file goes through `safe()` before it reaches a figure.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence

import numpy as np
import pandas as pd
import plotly.colors as pcolors
import plotly.graph_objects as go
from plotly.subplots import make_subplots

BAND = 64  # tokens per heatmap line
DIVERGING = "RdBu"  # red = negative credit, blue = positive; centred at 0
CELL_TEXT_LIMIT = 12_000  # above this many cells only the last row of each band shows token text
# Hover label of a heatmap cell; customdata = [pos, token, row, value, logprob, entropy, *shares], strings
# escaped and formatted when the figure is built, shares as fractions (the template names them).
HOVER = (
    "<b>%{customdata[1]}</b> · pos %{customdata[0]}<br>%{customdata[2]}: %{customdata[3]}<br>"
    "logprob %{customdata[4]} · entropy %{customdata[5]}"
)


def safe(text: str) -> str:
    """Escape `<`, `>`, `&`, quotes for Plotly's HTML-ish text rendering.

    Plotly decodes numeric entities and a few named ones, but not `&quot;`, so `"` becomes `&#34;`
    (else a hover label shows `&quot;` where the model wrote a quote)."""
    return html.escape(str(text), quote=True).replace("&quot;", "&#34;")


def shown_token(text: str) -> str:
    """A token with its whitespace made visible (newline ⏎, tab ⇥, space ␣), not escaped."""
    return str(text).replace("\n", "⏎").replace("\t", "⇥").replace(" ", "␣")


def visible_token(text: str, width: int = 3) -> str:
    """A token as it can be read in a cell: whitespace made visible, cut to `width` characters, escaped."""
    shown = shown_token(text)
    if len(shown) > width:
        shown = shown[: width - 1] + "…"
    return safe(shown)


def symmetric_range(*arrays: np.ndarray) -> float:
    """max |value| over the arrays (1.0 when all are 0 or empty): the half-width of a centred scale."""
    peak = 0.0
    for a in arrays:
        a = np.asarray(a, dtype=np.float64)
        finite = a[np.isfinite(a)]
        if finite.size:
            peak = max(peak, float(np.abs(finite).max()))
    return peak if peak > 0 else 1.0


SCALES = ("shared", "row", "quantile")
SCALE_LABELS = {
    "shared": "shared (max |A| of all rows)",
    "row": "per row (each row its own max |A|)",
    "quantile": "quantile (98th percentile of |A|: robust to one spike)",
}
OWN_SCALE_ROWS = ("true credit",)  # ground truth in its own units: never on an estimator's scale
QUANTILE = 0.98


def quantile_range(*arrays: np.ndarray, q: float = QUANTILE) -> float:
    """The q-quantile of |value| over the arrays: a half-width one spike cannot stretch (falls back to the
    max when the quantile is 0)."""
    parts = [np.abs(np.asarray(a, dtype=np.float64)) for a in arrays]
    flat = np.concatenate([p[np.isfinite(p)] for p in parts]) if parts else np.array([])
    if not flat.size:
        return 1.0
    peak = float(np.quantile(flat, q))
    return peak if peak > 0 else symmetric_range(*arrays)


def scale_peaks(
    rows: dict[str, np.ndarray], mode: str = "shared", locked: float | None = None
) -> dict[str, float]:
    """The colour half-width of each row: `shared` (one max |A| for all), `row` (each its own), `quantile`
    (one robust half-width). `locked` replaces the shared half-width (a β move does not rescale). Rows in
    OWN_SCALE_ROWS always get their own."""
    if mode not in SCALES:
        raise ValueError(f"unknown colour scale {mode!r}; use one of {', '.join(SCALES)}")
    names = list(rows)
    own = {n: symmetric_range(rows[n]) for n in names if n in OWN_SCALE_ROWS}
    rest = [rows[n] for n in names if n not in own]
    if mode == "row":
        return {n: own.get(n, symmetric_range(rows[n])) for n in names}
    if locked is not None and locked > 0:
        peak = float(locked)
    else:
        peak = quantile_range(*rest) if mode == "quantile" else symmetric_range(*rest)
    return {n: own.get(n, peak) for n in names}


def nice(v, digits: int = 3, signed: bool = True) -> str:
    """A number for people: '–' for missing/NaN, no '-0.000', `digits` decimals."""
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    if not math.isfinite(v):
        return "–"
    text = f"{v:+.{digits}f}" if signed else f"{v:.{digits}f}"
    if float(text) == 0:
        return f"{0:.{digits}f}"
    return text


def percent(v) -> str:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return "–"
    return "–" if not math.isfinite(v) else f"{v:.0%}"


def credit_colour(value: float, peak: float) -> tuple[str, str]:
    """(background, text colour) of a value on the diverging scale centred at 0 with half-width `peak`."""
    if value is None or not np.isfinite(value):
        return "rgba(0,0,0,0)", "inherit"
    x = float(np.clip(value / (peak if peak > 0 else 1.0), -1.0, 1.0))
    (bg,) = pcolors.sample_colorscale(DIVERGING, [(x + 1) / 2])
    return bg, ("#ffffff" if abs(x) > 0.6 else "#111111")


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


def _colour_axis(peak: float, height: int) -> dict:
    """The shared colour axis on [-peak, peak], centred at 0, labelled in A at its ends and 0."""
    return {
        "colorscale": DIVERGING,
        "cmin": -peak,
        "cmax": peak,
        "cmid": 0,
        "colorbar": {
            "title": {"text": "A", "side": "top"},
            "thickness": 10,
            "lenmode": "pixels",
            "len": min(max(100, height - 30), 320),
            "tickvals": [-peak, 0, peak],
            "ticktext": [nice(-peak, 2), "0", nice(peak, 2)],
            "tickfont": {"size": 10},
        },
    }


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

    Cells are sized to their token text (`cell_units`, about two characters a unit) and packed into bands
    `band` units wide, so a character-level run has `band` tokens a line and a subword run fewer, each
    readable. Each band is one heatmap trace with cell edges; all share one colour axis in A (the most
    common half-width); a row with another half-width is rescaled onto it and says so in its label.
    The hover shows the true value.
    """
    names = list(rows)
    R = len(names)
    if cell_text is None:
        cell_text = True if len(tokens) * R <= CELL_TEXT_LIMIT else "last"
    per_row = {n: list(row_tokens[n]) if row_tokens is not None else list(tokens) for n in names}
    L = max((len(v) for v in per_row.values()), default=0) if row_tokens is not None else len(tokens)
    # a position's width: the widest text any row has there (Group rows differ), in units
    widths = [
        max((cell_units(shown_token(per_row[n][t])) for n in names if t < len(per_row[n])), default=1)
        for t in range(L)
    ]
    cells = band_cells(widths, band)
    n_bands = (cells[-1][0] + 1) if cells else 1
    if peaks is None:
        peak = zmax if zmax is not None else symmetric_range(*[rows[n] for n in names])
        peaks = {n: peak for n in names}
    # the colour axis is in A on the most common half-width; a row on its own scale is rescaled onto it
    # (its label says so), so the z of every other row is its true value
    common = max(set(peaks.values()), key=list(peaks.values()).count) if peaks else 1.0
    lp = [_fmt(v) for v in _column(token_info, "logprob", L)]
    ent = [_fmt(v) for v in _column(token_info, "entropy", L)]
    shares = shares or {}
    share_names = [safe(k).replace("%{", "% {") for k in shares]  # names go into the template itself
    share_cols = [np.round(np.nan_to_num(np.asarray(v, dtype=np.float64)), 2) for v in shares.values()]
    share_values = np.stack(share_cols, axis=1).tolist() if share_cols else [[]] * L
    hover = HOVER + "".join(
        ("<br>" if i == 0 else " · ") + f"{n} %{{customdata[{6 + i}]:.0%}}" for i, n in enumerate(share_names)
    )
    hover += "<extra></extra>"
    by_band: dict[int, list[int]] = {}
    for t, (bnd, _) in enumerate(cells):
        by_band.setdefault(bnd, []).append(t)
    fig = go.Figure()
    xs, ys, custom = [], [], []
    for bnd in range(n_bands):
        members = by_band.get(bnd, [])
        edges = [cells[t][1] - 0.5 for t in members] + (
            [cells[members[-1]][1] + widths[members[-1]] - 0.5] if members else [-0.5, 0.5]
        )
        top = bnd * (R + 1)
        z = np.full((R, max(len(members), 1)), np.nan)
        text = np.full(z.shape, "", dtype=object)
        band_custom = np.full(z.shape, None, dtype=object)
        for r, name in enumerate(names):
            values = np.asarray(rows[name], dtype=np.float64)
            label = safe(name)
            row_text = per_row[name]
            for j, t in enumerate(members):
                if t >= len(row_text):
                    continue
                v = values[t] if t < len(values) else np.nan
                z[r, j] = v * (common / peaks[name]) if np.isfinite(v) else np.nan  # on the common scale
                if cell_text is True or (cell_text == "last" and r == R - 1):
                    text[r, j] = visible_token(row_text[t], 2 * widths[t])
                band_custom[r, j] = [
                    offset + t, safe(repr(row_text[t])[1:-1]), label, _fmt(v), lp[t], ent[t], *share_values[t]
                ]
                xs.append(cells[t][1] + (widths[t] - 1) / 2)
                ys.append(top + r)
                custom.append(band_custom[r, j])
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=edges,
                y=[top + r - 0.5 for r in range(R + 1)],
                text=text,
                texttemplate="%{text}",
                textfont={"size": 10},
                customdata=None if clickable else band_custom,
                hovertemplate=None if clickable else hover,
                hoverinfo="skip" if clickable else None,
                hoverongaps=False,
                coloraxis="coloraxis",
                xgap=1,
                ygap=1,
                name=f"band {bnd}",
            )
        )
    # Heatmaps emit no selection events, so an invisible marker per cell carries hover and clicks.
    # SVG, not WebGL: headless/software-rendered browsers draw it several times faster.
    if clickable:
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                customdata=custom,
                hovertemplate=hover,
                mode="markers",
                marker={"size": 12, "color": "rgba(0,0,0,0)", "symbol": "square"},
                selected={"marker": {"color": "rgba(0,0,0,0.35)"}},
                unselected={"marker": {"opacity": 1}},
                showlegend=False,
                name="tokens",
            )
        )
    for pos in highlight:
        t = int(pos) - offset
        if 0 <= t < L:
            bnd, col = cells[t]
            top = bnd * (R + 1)
            fig.add_shape(
                type="rect",
                x0=col - 0.5,
                x1=col + widths[t] - 0.5,
                y0=top - 0.5,
                y1=top + R - 0.5,
                line={"color": "#111111", "width": 3},
                fillcolor="rgba(0,0,0,0)",
                layer="above",
                name=f"selected {int(pos)}",
            )
    tickvals = [b * (R + 1) + r for b in range(n_bands) for r in range(R)]
    starts = {b: by_band[b][0] for b in by_band}
    ticktext = [
        _row_label(n, peaks[n], common) + (f"  [{offset + starts.get(b, 0)}]" if r == 0 else "")
        for b in range(n_bands)
        for r, n in enumerate(names)
    ]
    height = n_bands * (R + 1) - 1
    fig_height = max(140, 22 * height + 50)  # a one-row figure keeps a readable colour bar
    fig.update_yaxes(
        tickvals=tickvals, ticktext=ticktext, autorange="reversed", showgrid=False, zeroline=False
    )
    fig.update_xaxes(showticklabels=False, showgrid=False, zeroline=False, range=[-0.5, band - 0.5])
    fig.update_layout(
        height=fig_height,
        margin={"l": 10, "r": 10, "t": 30 if title else 10, "b": 10},
        title=safe(title) if title else None,
        clickmode="event+select",
        dragmode=False,
        plot_bgcolor="rgba(0,0,0,0)",
        coloraxis=_colour_axis(common, fig_height),
    )
    return fig


def _row_label(name: str, peak: float, common: float) -> str:
    label = safe(name)
    return label if np.isclose(peak, common) else f"{label} (±{nice(peak, 2, signed=False)})"


def credit_text_html(
    tokens: Sequence[str],
    values: np.ndarray,
    peak: float,
    *,
    offset: int = 0,
    selected: int | None = None,
    facts: Sequence[str] | None = None,
    dimmed: np.ndarray | None = None,
) -> str:
    """The response as running text, each token a span coloured by its value on the diverging scale
    centred at 0 with half-width `peak`.

    Token text is untrusted: every character goes through `html.escape`. Whitespace stays as written
    (the container uses `white-space: pre-wrap`, so the text wraps like the document); a newline shows
    as ↵ before the break, a tab as ⇥; every span has a hairline edge, so a space token is a visible box.
    Each span carries `data-pos` (absolute position) for clicks and a `title` (hover: position, value and
    `facts[t]`, escaped). `selected` is outlined; `dimmed` (L,) bool tokens (loss-masked) are faded."""
    parts = []
    for t, token in enumerate(tokens):
        v = float(values[t]) if t < len(values) else float("nan")
        bg, fg = credit_colour(v, peak)
        shown = html.escape(str(token), quote=True)
        shown = shown.replace("\n", '<span class="nl">↵</span>\n')
        shown = shown.replace("\t", '<span class="nl">⇥</span>\t')
        title = f"pos {offset + t} · A {nice(v)}" + (f" · {facts[t]}" if facts is not None else "")
        classes = "tok" + (" sel" if selected == offset + t else "") + (
            " dim" if dimmed is not None and t < len(dimmed) and dimmed[t] else ""
        )
        parts.append(
            f'<span class="{classes}" data-pos="{offset + t}" style="background:{bg};color:{fg}" '
            f'title="{html.escape(title, quote=True)}">{shown}</span>'
        )
    return '<div class="credit-text">' + "".join(parts) + "</div>"


def overview_strip(values: np.ndarray, start: int, stop: int, peak: float | None = None,
                   bins: int = 256) -> go.Figure:
    """The whole response as one thin row (long responses binned: each bin shows its largest |A|) with the
    window [start, stop) outlined, so a reader sees where the drawn tokens sit."""
    values = np.asarray(values, dtype=np.float64)
    L = len(values)
    n = max(1, min(bins, L))
    edges = np.linspace(0, L, n + 1).round().astype(int)
    shown = []
    for a, b in zip(edges[:-1], edges[1:], strict=True):
        part = values[a:max(b, a + 1)]
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
    fig.add_shape(type="rect", x0=start, x1=stop, y0=-0.5, y1=0.5, line={"color": "#111111", "width": 2},
                  fillcolor="rgba(0,0,0,0)", name="window")
    fig.update_xaxes(range=[0, max(L, 1)], showgrid=False, zeroline=False, tickformat="d",
                     tickfont={"size": 9})
    fig.update_yaxes(visible=False)
    fig.update_layout(height=60, margin={"l": 10, "r": 10, "t": 4, "b": 20}, dragmode=False,
                      title=None, plot_bgcolor="rgba(0,0,0,0)")
    return fig


def token_strips_figure(strips: dict[str, np.ndarray], tokens: Sequence[str], *, offset: int = 0,
                        dimmed: np.ndarray | None = None, highlight: int | None = None) -> go.Figure:
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
        fig.update_yaxes(title={"text": safe(name), "font": {"size": 10}}, row=i + 1, col=1,
                         tickfont={"size": 9}, nticks=3)
        if highlight is not None and offset <= highlight < offset + L:
            fig.add_vline(x=highlight, line={"color": "#111111", "width": 1, "dash": "dot"}, row=i + 1, col=1)
    fig.update_xaxes(tickformat="d", showgrid=False)
    fig.update_layout(height=60 + 70 * max(len(names), 1), bargap=0.05,
                      margin={"l": 10, "r": 10, "t": 10, "b": 10}, dragmode=False)
    return fig


def _column(frame: pd.DataFrame | None, name: str, n: int) -> np.ndarray:
    if frame is None or name not in frame.columns:
        return np.full(n, np.nan)
    return np.asarray(frame[name], dtype=np.float64)


def _fmt(v: float) -> str:
    return nice(v)


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


def small_multiples(advantages: dict[str, np.ndarray], tokens: Sequence[str], band: int = BAND, *,
                    peaks: dict[str, float] | None = None, offset: int = 0) -> go.Figure:
    """One row per estimator in every band (the rollout wrapped into bands, cells sized to their text), so
    the estimators' credit for a token sits one above the other; one colour axis (`peaks`: per-row or
    shared half-widths, default one shared max |A|). Labels are row ticks: they never overlap."""
    return credit_heatmap(dict(advantages), tokens, band=band, peaks=peaks, offset=offset, clickable=False,
                          cell_text="last")


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


def class_mass_figure(frame: pd.DataFrame) -> go.Figure:
    """Credit share per token class and estimator (bars) against the class's share of tokens (marks)."""
    fig = go.Figure()
    for name, part in frame.groupby("estimator", sort=False):
        fig.add_trace(go.Bar(x=part["token_class"], y=part["credit_share"], name=safe(name)))
    counts = frame.drop_duplicates("token_class")
    fig.add_trace(
        go.Scatter(
            x=counts["token_class"],
            y=counts["token_share"],
            mode="markers",
            marker={"symbol": "line-ew-open", "size": 28, "line": {"width": 3}, "color": "#333"},
            name="share of tokens",
        )
    )
    fig.update_layout(
        barmode="group",
        height=360,
        xaxis={"tickangle": -30, "automargin": True},  # class names stay whole under the bars
        yaxis={"title": "share of Σ|A|", "tickformat": ".0%"},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": 1.12},
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


def beta_trajectories(frame: pd.DataFrame) -> go.Figure:
    """Dual-ascent replay: β_c over steps (top) and violation rates against τ_c (bottom).

    frame: rows (step, channel, beta, rate, tau)."""
    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, subplot_titles=("β per channel", "violation rate vs τ")
    )
    palette = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"]
    for i, (channel, part) in enumerate(frame.groupby("channel", sort=False)):
        color = palette[i % len(palette)]
        name = safe(channel)
        for row, column, label in ((1, "beta", name), (2, "rate", f"{name} rate")):
            fig.add_trace(
                go.Scatter(
                    x=part["step"],
                    y=part[column],
                    mode="lines+markers",
                    name=label,
                    line={"color": color},
                    legendgroup=name,
                    showlegend=row == 1,
                ),
                row=row,
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
    fig.update_layout(height=460, margin={"l": 10, "r": 10, "t": 30, "b": 10})
    fig.update_xaxes(tickformat="d", dtick=_step_tick(frame["step"]))
    fig.update_xaxes(title="step", row=2, col=1)
    return fig


def _step_tick(steps) -> int:
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


# ---- trends over steps (one row per step from backend.explorer.step_trends) ----------------------------

TREND_HEIGHT = 300


def _trend_layout(fig: go.Figure, title: str, yaxis: dict | None = None) -> go.Figure:
    fig.update_layout(
        title=title,
        height=TREND_HEIGHT,
        xaxis={"title": "step", "dtick": 1},
        yaxis=yaxis or {},
        margin={"l": 10, "r": 10, "t": 40, "b": 10},
        legend={"orientation": "h", "y": -0.25},
        hovermode="x unified",
    )
    return fig


def trend_lines(frame: pd.DataFrame, columns: dict[str, str], title: str, percent: bool = False) -> go.Figure:
    """One line per column over steps. columns: column -> legend label (channel names are escaped)."""
    fig = go.Figure()
    for column, label in columns.items():
        if column in frame.columns:
            fig.add_trace(go.Scatter(x=frame["step"], y=frame[column].astype(float), mode="lines+markers",
                                     name=safe(label)))
    return _trend_layout(fig, title, {"tickformat": ".0%"} if percent else None)


def class_share_trend(frame: pd.DataFrame, columns: dict[str, str]) -> go.Figure:
    """Share of Σ|A| per token class over steps, stacked to 100% (a growing `filler` band is the trend to
    watch). columns: share column -> class name."""
    fig = go.Figure()
    for column, label in columns.items():
        fig.add_trace(go.Scatter(x=frame["step"], y=frame[column].astype(float).fillna(0.0), name=safe(label),
                                 mode="lines", stackgroup="classes", hovertemplate="%{y:.1%}"))
    return _trend_layout(fig, "credit share by token class", {"title": "share of Σ|A|", "tickformat": ".0%",
                                                              "range": [0, 1]})


def quantile_band(frame: pd.DataFrame) -> go.Figure:
    """The advantage distribution per step: q05–q95 and q25–q75 bands around the median."""
    fig = go.Figure()
    step = frame["step"]
    for low, high, label, alpha in (("q05", "q95", "5–95%", 0.15), ("q25", "q75", "25–75%", 0.35)):
        fig.add_trace(go.Scatter(x=step, y=frame[high].astype(float), mode="lines", line={"width": 0},
                                 showlegend=False, hoverinfo="skip"))
        fig.add_trace(go.Scatter(x=step, y=frame[low].astype(float), mode="lines", line={"width": 0},
                                 fill="tonexty", fillcolor=f"rgba(69,117,180,{alpha})", name=label))
    fig.add_trace(go.Scatter(x=step, y=frame["q50"].astype(float), mode="lines+markers", name="median",
                             line={"color": "#4575b4"}))
    return _trend_layout(fig, "advantage quantiles over tokens")


def _bar(value) -> float:
    return 0.0 if value is None or value != value else float(value)
