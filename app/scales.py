"""Colour scales of credit: diverging around 0, shared, per row or quantile, lockable, and the colour of
one value (the text view) or a figure's colour axis (the heatmaps)."""

from __future__ import annotations

import numpy as np
import plotly.colors as pcolors

from app.fmt import nice

DIVERGING = "RdBu"  # red = negative credit, blue = positive; centred at 0


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


def credit_colour(value: float, peak: float) -> tuple[str, str]:
    """(background, text colour) of a value on the diverging scale centred at 0 with half-width `peak`."""
    if value is None or not np.isfinite(value):
        return "rgba(0,0,0,0)", "inherit"
    x = float(np.clip(value / (peak if peak > 0 else 1.0), -1.0, 1.0))
    (bg,) = pcolors.sample_colorscale(DIVERGING, [(x + 1) / 2])
    return bg, ("#ffffff" if abs(x) > 0.6 else "#111111")


def colour_axis(peak: float, height: int) -> dict:
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
