"""The reward of each step as a histogram (issue 46 item 5): the Trends view's bubbles and `creditlens
histogram`. Every bin names the Explorer filter that lists its rollouts (`where`: `step=3,reward>=0.2,
reward<0.4`, what `creditlens rollouts --where` and the Explorer's `?where=` read), and its count is the
number of rows that filter gives: a click on a bin opens exactly the rollouts counted.

The reward is the Explorer's: the sum of the rollout's channel scores (`rollout_summary.reward`). A run
whose rewards take at most `MAX_VALUES` distinct values (a 0/1 verifier, a few partial-credit levels) gets
a bin per value (`reward=1.0`); any other, `bins` equal-width bins over the run's range, the same for every
step (the last one closed). Rollouts without a score are not counted.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from backend.core.errors import InputError
from backend.store import StoreHandle
from backend.views import explorer

MAX_VALUES = 12
COLUMNS = ["step", "bin", "low", "high", "label", "rollouts", "where"]


def _edges(values: np.ndarray, bins: int) -> list[tuple[float, float, bool]]:
    """(low, high, closed) per bin; `closed`: the bin holds `high` (the last bin, or a value bin)."""
    distinct = np.unique(values)
    if len(distinct) <= MAX_VALUES:
        return [(float(v), float(v), True) for v in distinct]
    # The run's lowest and highest reward, and between them edges cut to 4 significant digits (readable in a
    # filter); a bin's filter names each edge by its repr, which reads back as the same float, so it selects
    # exactly the rollouts counted in the bin.
    inner = [float(f"{e:.4g}") for e in np.linspace(distinct[0], distinct[-1], bins + 1)[1:-1]]
    edges = sorted(
        {float(distinct[0]), *(e for e in inner if distinct[0] < e < distinct[-1]), float(distinct[-1])}
    )
    return [(edges[i], edges[i + 1], i == len(edges) - 2) for i in range(len(edges) - 1)]


def _where(step: int, low: float, high: float, closed: bool) -> str:
    if low == high:
        return f"step={step},reward={low!r}"
    return f"step={step},reward>={low!r},reward{'<=' if closed else '<'}{high!r}"


def _label(low: float, high: float, closed: bool) -> str:
    return f"{low:.4g}" if low == high else f"[{low:.4g}, {high:.4g}{']' if closed else ')'}"


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
    for index, (low, high, closed) in enumerate(_edges(rewards, bins)):
        inside = (rewards >= low) & ((rewards <= high) if closed else (rewards < high))
        counts = pd.Series(steps[inside]).value_counts()
        for step, count in counts.items():
            rows.append(
                {
                    "step": int(step),
                    "bin": index,
                    "low": low,
                    "high": high,
                    "label": _label(low, high, closed),
                    "rollouts": int(count),
                    "where": _where(int(step), low, high, closed),
                }
            )
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["step", "bin"], ignore_index=True)
