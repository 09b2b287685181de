"""Colour scales of credit: diverging around 0, shared, per row, quantile or robust (or `auto`: shared unless
one spike would wash out the rest, then quantile), lockable; what the active scale is and which rows saturate
it, in words; and the colour of one value (the text view) or a figure's colour axes (the heatmaps)."""

from __future__ import annotations

import functools

import numpy as np
import plotly.colors as pcolors

from app.ui.fmt import significant
from backend.store.landed_queries import REALIZED_ROW

DIVERGING = "RdBu"  # red = negative credit, blue = positive; centred at 0


def largest_abs(*arrays: np.ndarray) -> float:
    """max |value| over the finite values of the arrays (0.0 when there are none)."""
    peak = 0.0
    for a in arrays:
        a = np.asarray(a, dtype=np.float64)
        finite = a[np.isfinite(a)]
        if finite.size:
            peak = max(peak, float(np.abs(finite).max()))
    return peak


def symmetric_range(*arrays: np.ndarray) -> float:
    """max |value| over the arrays (1.0 when all are 0 or empty): the half-width of a centred scale."""
    peak = largest_abs(*arrays)
    return peak if peak > 0 else 1.0


SCALES = ("auto", "shared", "row", "quantile", "robust")
SCALE_LABELS = {
    "auto": "auto (shared, or quantile when one spike would wash out the rest)",
    "shared": "shared (max |A| of all rows)",
    "row": "per row (each row its own max |A|)",
    "quantile": "quantile (98th percentile of |A|: robust to one spike)",
    "robust": "robust shared (the rows' middle 98th percentile of |A|: robust to one row)",
}
# ground truth and the realized change of log π are in their own units: never on an estimator's scale
OWN_SCALE_ROWS = ("true credit", REALIZED_ROW)
QUANTILE = 0.98
# `auto` clips at the quantile when the largest |A| is more than this many times it: most cells would
# otherwise sit within a fifth of the scale's middle, nearly white (GRPO's ±0.35 beside a −5 spike).
WASHOUT = 4.0
BAR_DIGITS = 3  # significant digits of a colour bar's end labels


def quantile_range(*arrays: np.ndarray, q: float = QUANTILE) -> float:
    """The q-quantile of |value| over the arrays: a half-width one spike cannot stretch (falls back to the
    max when the quantile is 0)."""
    parts = [np.abs(np.asarray(a, dtype=np.float64)) for a in arrays]
    flat = np.concatenate([p[np.isfinite(p)] for p in parts]) if parts else np.array([])
    if not flat.size:
        return 1.0
    peak = float(np.quantile(flat, q))
    return peak if peak > 0 else symmetric_range(*arrays)


def robust_range(*arrays: np.ndarray, q: float = QUANTILE) -> float:
    """A shared half-width no single row can set: each row's q-quantile of |value| (its own spikes do not
    count), then the lower median over the rows. An added row with 20 times the others' credit moves it by
    one rank at most, so it saturates (named by `saturation`) instead of washing the others out; with two
    rows it is the smaller. Falls back to `symmetric_range` when it is 0."""
    peaks = sorted(quantile_range(a, q=q) for a in arrays if np.isfinite(np.asarray(a, np.float64)).any())
    if not peaks:
        return 1.0
    peak = peaks[(len(peaks) - 1) // 2]
    return peak if peak > 0 else symmetric_range(*arrays)


def saturation(rows: dict[str, np.ndarray], peaks: dict[str, float]) -> list[tuple[str, int, float, float]]:
    """(row, tokens beyond ±its half-width, its max |A|, the half-width) for every row drawn at the colour
    bar's ends somewhere: the rows a shared scale saturates, and by how much."""
    out = []
    for name, values in rows.items():
        a = np.abs(np.asarray(values, dtype=np.float64))
        a = a[np.isfinite(a)]
        peak = peaks.get(name, 0.0)
        beyond = int((a > peak * (1 + 1e-9)).sum()) if peak > 0 else 0
        if beyond:
            out.append((name, beyond, float(a.max()), peak))
    return out


def saturation_note(rows: dict[str, np.ndarray], peaks: dict[str, float]) -> str:
    """'row X saturates: N tokens beyond ±s, max |A| m.' for each saturating row ('' when none does)."""
    return " ".join(
        f"{name} saturates: {n} token{'s' if n != 1 else ''} beyond ±{significant(peak, 2, signed=False)}, "
        f"max |A| {significant(top, 2, signed=False)}."
        for name, n, top, peak in saturation(rows, peaks)
    )


def scale_peaks(
    rows: dict[str, np.ndarray], mode: str = "shared", locked: float | None = None
) -> dict[str, float]:
    """The colour half-width of each row: `shared` (one max |A| for all), `row` (each its own), `quantile`
    (one half-width robust to spikes), `robust` (one half-width robust to a row: `robust_range`), `auto`
    (`shared`, or `quantile` when `washed_out`). `locked` replaces the
    shared half-width (a β move does not rescale). Rows in OWN_SCALE_ROWS always get their own."""
    if mode not in SCALES:
        raise ValueError(f"unknown colour scale {mode!r}; use one of {', '.join(SCALES)}")
    names = list(rows)
    own = {n: symmetric_range(rows[n]) for n in names if n in OWN_SCALE_ROWS}
    rest = [rows[n] for n in names if n not in own]
    if mode == "row":
        return {n: own.get(n, symmetric_range(rows[n])) for n in names}
    if locked is not None and locked > 0:
        peak = float(locked)
    elif mode == "quantile" or (mode == "auto" and washed_out(*rest)):
        peak = quantile_range(*rest)
    elif mode == "robust":
        peak = robust_range(*rest)
    else:
        peak = symmetric_range(*rest)
    return {n: own.get(n, peak) for n in names}


def washed_out(*arrays: np.ndarray) -> bool:
    """Whether one spike would wash out the rest on a max |A| scale: the max is WASHOUT times the quantile."""
    return symmetric_range(*arrays) > WASHOUT * quantile_range(*arrays)


def active_scale(rows: dict[str, np.ndarray], mode: str = "auto", locked: float | None = None) -> str:
    """The scale `scale_peaks(rows, mode, locked)` draws, in words (a caption under the scale choice): which
    scale, its half-width, and which rows' values lie beyond it (drawn at the end of the colour bar)."""
    names = [n for n in rows if n not in OWN_SCALE_ROWS]
    rest = [rows[n] for n in names]
    peaks = scale_peaks(rows, mode, locked)
    if mode == "row":
        text = "Colour scale: per row, each row its own max |A| (each row's colour bar below the rows)."
    else:
        peak = peaks[names[0]] if names else 1.0
        if locked is not None and locked > 0 and mode != "row":
            what = "locked"
        elif mode == "robust":
            what = f"robust shared (the middle row's {QUANTILE:.0%} of |A|, so no one row sets it)"
        elif mode == "quantile" or (mode == "auto" and washed_out(*rest)):
            what = f"{'auto → ' if mode == 'auto' else ''}quantile ({QUANTILE:.0%} of |A|)"
        else:
            what = f"{'auto → ' if mode == 'auto' else ''}shared max |A|"
        text = f"Colour scale: {what}, ±{significant(peak, 2, signed=False)}."
        beyond = [(n, largest_abs(rows[n])) for n in names]
        beyond = [(n, m) for n, m in beyond if m > peak * (1 + 1e-9)]
        if mode == "robust":
            beyond = []
            text += " " + (saturation_note({n: rows[n] for n in names}, peaks) or "No row saturates it.")
        if beyond:
            text += (
                " Beyond it (drawn at the scale's end; the hover has the value): "
                + ", ".join(f"{n} up to ±{significant(m, 2, signed=False)}" for n, m in beyond)
                + "."
            )
        elif mode == "auto":
            text += " No spike washes out the rest."
    own = [n for n in rows if n in OWN_SCALE_ROWS]
    if own:
        text += " " + ", ".join(own) + " has its own scale (its own units)."
    return text


@functools.cache
def _diverging_stops() -> list:
    """DIVERGING as Plotly's [position, colour] stops, looked up once: given the name, every sample looked
    it up again (a deep copy of every named scale), 3 ms a token, 0.19 s of a Rollout page's script run."""
    return pcolors.get_colorscale(DIVERGING)


def credit_colour(value: float, peak: float) -> tuple[str, str]:
    """(background, text colour) of a value on the diverging scale centred at 0 with half-width `peak`."""
    if value is None or not np.isfinite(value):
        return "rgba(0,0,0,0)", "inherit"
    x = float(np.clip(value / (peak if peak > 0 else 1.0), -1.0, 1.0))
    (bg,) = pcolors.sample_colorscale(_diverging_stops(), [(x + 1) / 2])
    return bg, ("#ffffff" if abs(x) > 0.6 else "#111111")


def colour_axis(peak: float, height: int, title: str = "A", beyond: bool = False) -> dict:
    """A colour axis on [-peak, peak], centred at 0, its bar labelled at its ends and 0 with significant
    digits (BAR_DIGITS: a 1e-4 range reads ±1.00e-4). `beyond`: some values lie past the ends (a quantile
    or locked scale); the end labels say ≤ / ≥."""
    low, high = significant(-peak, BAR_DIGITS), significant(peak, BAR_DIGITS)
    if beyond:
        low, high = f"≤{low}", f"≥{high}"
    return {
        "colorscale": DIVERGING,
        "cmin": -peak,
        "cmax": peak,
        "cmid": 0,
        "colorbar": {
            "title": {"text": title, "side": "top"},
            "thickness": 10,
            "lenmode": "pixels",
            "len": min(max(100, height - 30), 320),
            "tickvals": [-peak, 0, peak],
            "ticktext": [low, "0", high],
            "tickfont": {"size": 10},
        },
    }
