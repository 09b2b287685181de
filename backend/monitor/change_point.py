"""The monitors' onset rule: the first step whose statistic departs from the run's own earlier steps by
more than their noise, and keeps departing.

For a candidate step i the baseline is the trailing `window` steps before it (at least `min_baseline`);
its level is their median m and its noise the scaled median absolute deviation σ = 1.4826 · MAD (σ of a
normal sample). Step i departs when, in the detector's direction,

    |x_i − m| ≥ z_warn · σ    and    |x_i − m| ≥ max(min_delta, min_rel · |m|)

(the second test is the smallest change worth a word: a baseline of identical values has σ = 0, and a
tiny σ would otherwise make any wobble a departure). The onset is the first i that departs together with
the `persistence − 1` steps after it, each compared with the same baseline (the one before the onset, so
the departing steps never dilute their own reference). A departure still in progress at the end of the
series, too short to be confirmed, is reported as pending (severity `info`).

Why a median and a trailing window: a run that improves slowly (entropy drifting down, length changing a
little) moves its median with it, and a linear drift of slope b over W steps gives |x − m| ≈ b·W/2
against 1.4826 · MAD ≈ 0.37 · b·W, a robust z near 1.35 whatever b is: a trend alone never fires, a change
of regime does. A share of a count (truncated responses, zero-variance groups) also gets the binomial
standard error of its step's count as a least noise (`find_onset(..., counts=)`): its steps are
quantized, so its MAD alone is often 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

Direction = Literal["up", "down", "both"]
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class OnsetRule:
    """min_baseline: earlier steps needed before a step can be an onset; window: at most this many
    earlier steps form the baseline; persistence: consecutive departing steps that confirm an onset;
    z_warn / z_alert: robust z of a departure (warn) and of a severe one (alert, at the onset step);
    min_delta / min_rel: the smallest absolute / relative (to |baseline|) change that counts;
    direction: which way departs (up, down or both)."""

    min_baseline: int = 5
    window: int = 20
    persistence: int = 2
    z_warn: float = 4.0
    z_alert: float = 8.0
    min_delta: float = 0.0
    min_rel: float = 0.0
    direction: Direction = "both"

    def __post_init__(self) -> None:
        if self.min_baseline < 2:
            raise ValueError(f"min_baseline must be at least 2, got {self.min_baseline!r}")
        if self.window < self.min_baseline:
            raise ValueError(f"window ({self.window!r}) must be at least min_baseline ({self.min_baseline})")
        if self.persistence < 1:
            raise ValueError(f"persistence must be at least 1, got {self.persistence!r}")
        if not 0 < self.z_warn <= self.z_alert:
            raise ValueError(f"need 0 < z_warn <= z_alert, got {self.z_warn!r}, {self.z_alert!r}")
        if self.min_delta < 0 or self.min_rel < 0:
            raise ValueError(f"min_delta and min_rel must be >= 0, got {self.min_delta!r}, {self.min_rel!r}")
        if self.direction not in ("up", "down", "both"):
            raise ValueError(f"direction must be up, down or both, got {self.direction!r}")


@dataclass(frozen=True)
class Onset:
    """index: position of the onset in the series; value: the statistic there; baseline: the median of
    the earlier steps; noise: their 1.4826 · MAD; z: (value − baseline) / noise (±inf when noise is 0);
    severe: |z| ≥ z_alert and the change is at least twice the smallest that counts; pending: the
    departure reaches the end of the series before it could persist."""

    index: int
    value: float
    baseline: float
    noise: float
    z: float
    severe: bool
    pending: bool


def _baseline(
    values: np.ndarray, i: int, rule: OnsetRule, counts: np.ndarray | None
) -> tuple[float, float] | None:
    earlier = values[max(0, i - rule.window) : i]
    earlier = earlier[np.isfinite(earlier)]
    if len(earlier) < rule.min_baseline:
        return None
    median = float(np.median(earlier))
    noise = MAD_TO_SIGMA * float(np.median(np.abs(earlier - median)))
    if counts is not None and counts[i] > 0:
        # A share of n items is quantized in steps of 1/n, so its MAD over a few steps is often 0; the
        # binomial standard error at the baseline share (at least that of one item in n) is its least noise.
        n = float(counts[i])
        noise = max(noise, math.sqrt(max(median * (1 - median), 1 / n) / n))
    return median, noise


def _departs(x: float, median: float, noise: float, rule: OnsetRule) -> bool:
    if not math.isfinite(x):
        return False
    change = x - median
    if rule.direction == "up" and change <= 0 or rule.direction == "down" and change >= 0:
        return False
    return abs(change) >= rule.z_warn * noise and abs(change) >= _smallest(median, rule) and change != 0


def _smallest(median: float, rule: OnsetRule) -> float:
    return max(rule.min_delta, rule.min_rel * abs(median))


def _z(change: float, noise: float) -> float:
    if noise > 0:
        return change / noise
    return math.copysign(math.inf, change) if change else 0.0


def find_onset(values, rule: OnsetRule, counts=None) -> Onset | None:
    """The first onset in `values` (one statistic per step, in step order; NaN: no value that step, never
    a departure and never part of a baseline), or None. counts: for a share of items (rollouts, groups),
    how many items each step has: the noise is then at least the share's binomial standard error."""
    x = np.asarray(values, dtype=np.float64)  # (S,)
    n = None if counts is None else np.asarray(counts, dtype=np.float64)  # (S,)
    for i in range(len(x)):
        base = _baseline(x, i, rule, n)
        if base is None or not _departs(x[i], *base, rule):
            continue
        median, noise = base
        following = x[i + 1 : i + rule.persistence]
        confirmed = all(_departs(v, median, noise, rule) for v in following)
        if not confirmed:
            continue
        change = float(x[i] - median)
        z = _z(change, noise)
        severe = abs(z) >= rule.z_alert and abs(change) >= 2 * _smallest(median, rule)
        return Onset(i, float(x[i]), median, noise, z, severe, pending=len(following) < rule.persistence - 1)
    return None
