"""The reward of each step as a histogram: the Trends view's bubbles and `creditlens
histogram`. Every bin names the Explorer filter that lists its rollouts (`where`: `step=3,reward>=0.2,
reward<0.4`, what `creditlens rollouts --where` and the Explorer's `?where=` read), and its count is the
number of rows that filter gives: a click on a bin opens exactly the rollouts counted.

The reward is the Explorer's: the sum of the rollout's channel scores (`rollout_summary.reward`). A run
whose rewards take at most `MAX_VALUES` distinct values (a 0/1 verifier, a few partial-credit levels) gets
a bin per value (`reward=1.0`); any other, `bins` equal-width bins over the run's range, the same for every
step (the last one closed). Rollouts without a score are not counted.
"""

from __future__ import annotations

import decimal
import math

import numpy as np
import pandas as pd

from backend.core.errors import InputError
from backend.store import StoreHandle
from backend.views import explorer

MAX_VALUES = 12
COLUMNS = ["step", "bin", "low", "high", "label", "rollouts", "where"]


DIGITS = 4
"""Significant digits of a bin's edges: readable in a filter, and the precision of the labels."""


def _rounded(x: float, digits: int, rounding: str) -> float:
    """`x` cut to `digits` significant digits toward `rounding` (decimal.ROUND_FLOOR or ROUND_CEILING): the
    nearest float to that decimal, which is on the same side of `x` (x is a float itself)."""
    if x == 0 or not math.isfinite(x):
        return x
    exact = decimal.Decimal(x)
    quantum = decimal.Decimal(1).scaleb(exact.adjusted() - digits + 1)
    return float(exact.quantize(quantum, rounding=rounding))


def _short_toward(v: float, limit: float, rounding: str) -> float:
    """The float nearest `v` with the fewest significant digits, rounded from `v` toward `limit` (ROUND_FLOOR
    when `limit` <= v, ROUND_CEILING when above) and not past it; `v` itself where none is shorter."""
    for digits in range(1, 18):
        candidate = _rounded(v, digits, rounding)
        if min(v, limit) <= candidate <= max(v, limit):
            return candidate
    return v


def _edges(values: np.ndarray, bins: int) -> list[tuple[float, float, bool, str]]:
    """(low, high, closed, label) per bin; `closed`: the bin holds `high` (the last bin, or a value bin).
    A bin's bounds are short decimals (its filter names each by its repr, which reads back as the same float)
    that select exactly the rewards counted in it: a reward logged as float32 (-0.47999998927116394) gets
    bounds between it and its neighbours (-0.48), never its float noise."""
    distinct = [float(v) for v in np.unique(values)]
    if len(distinct) <= MAX_VALUES:
        bounds = []
        for i, v in enumerate(distinct):
            if float(f"{v:.{DIGITS}g}") == v:  # short already: the value itself (`reward=1.0`)
                bounds.append((v, v, True, f"{v:.{DIGITS}g}"))
                continue
            below = (
                math.nextafter(distinct[i - 1], math.inf) if i else _rounded(v, DIGITS, decimal.ROUND_FLOOR)
            )
            above = (
                math.nextafter(distinct[i + 1], -math.inf)
                if i + 1 < len(distinct)
                else _rounded(v, DIGITS, decimal.ROUND_CEILING)
            )
            low = _short_toward(v, below, decimal.ROUND_FLOOR)
            bounds.append((low, _short_toward(v, above, decimal.ROUND_CEILING), True, f"{v:.{DIGITS}g}"))
        return bounds
    # The run's lowest and highest reward rounded outward, and between them edges cut to DIGITS significant
    # digits: nothing lies below the lowest or above the highest, so the outer bins hold what they held.
    low = _rounded(distinct[0], DIGITS, decimal.ROUND_FLOOR)
    high = _rounded(distinct[-1], DIGITS, decimal.ROUND_CEILING)
    inner = [float(f"{e:.{DIGITS}g}") for e in np.linspace(distinct[0], distinct[-1], bins + 1)[1:-1]]
    edges = sorted({low, *(e for e in inner if distinct[0] < e < distinct[-1]), high})
    last = len(edges) - 2
    return [
        (a, b, i == last, f"[{a:.{DIGITS}g}, {b:.{DIGITS}g}{']' if i == last else ')'}")
        for i, (a, b) in enumerate(zip(edges, edges[1:], strict=False))
    ]


def _where(step: int, low: float, high: float, closed: bool) -> str:
    if low == high:
        return f"step={step},reward={low!r}"
    return f"step={step},reward>={low!r},reward{'<=' if closed else '<'}{high!r}"


def reward_histogram(handle: StoreHandle, run: str, bins: int = 10) -> pd.DataFrame:
    """One row per step and bin (empty bins left out): step, bin (its index), low, high, label, rollouts,
    where."""
    if bins < 1:
        raise InputError(f"--bins {bins}: at least 1")
    explorer.prepare(handle, run)  # the rollout summaries, where the store lacks them
    with handle.read() as store:
        frame = store.con.execute(
            "SELECT step, reward FROM rollout_summary WHERE run_id = ? AND reward IS NOT NULL",
            [store.run_id(run)],
        ).df()
    if frame.empty:
        return pd.DataFrame(columns=COLUMNS)
    steps, rewards = frame["step"].to_numpy(np.int64), frame["reward"].to_numpy(np.float64)
    rows = []
    for index, (low, high, closed, label) in enumerate(_edges(rewards, bins)):
        inside = (rewards >= low) & ((rewards <= high) if closed else (rewards < high))
        counts = pd.Series(steps[inside]).value_counts()
        for step, count in counts.items():
            rows.append(
                {
                    "step": int(step),
                    "bin": index,
                    "low": low,
                    "high": high,
                    "label": label,
                    "rollouts": int(count),
                    "where": _where(int(step), low, high, closed),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["step", "bin"], ignore_index=True)
