"""Cliff tokens on the Monte Carlo teacher's values (docs/estimators.md section 5c; `creditlens cliff`, the
Rollout view's marker, teacher-bench's `cliff_hit1`).

Cliff Tokens (Ko, Kang, Lee, arXiv 2606.25524; official code beaver-22/Cliff-token @ 1df7c3c,
`src/analysis/cliff_threshold.py` `is_cliff` and `src/analysis/detector.py`
`find_all_cliff_tokens_statistical`): the potential of a prefix is its success rate over N sampled
continuations, p = k / N. Between two consecutive valued prefixes the potential drops by Δ = p_prev − p;
the token that ends the later prefix is a cliff when a one-sided two-proportion z-test says the drop is
larger than δ0:

    k_prev > 0  and  Δ > δ0 + z_α · SE,  SE = sqrt(p_prev (1 − p_prev) / N_prev + p (1 − p) / N)

(δ0 = 0.1, z_α = 1.645; unpooled SE, 0 when both rates are 0 or 1). The first cliff of a response is the
one its paper deletes and resamples.

Positions are the teacher's: `pos` is a prefix length (the state before token `pos`), so the drop between
valued prefixes a < b lands on token b − 1, the last token of the segment [a, b) (the official code reports
the same token: a score at index j values the prefix of j + 1 tokens and a drop is reported at the later
score's token). When every position is valued the segment is that one token. Success counts are read from
V̂ as the official code reads its stored scores: k = round(V̂ · N), clamped to [0, N], so the verifier's
rewards should be 0/1. Where we differ from the official code: the teacher values the empty prefix
(position 0) too, which gives the first token a test the official code never makes; N may differ between
positions (each side of the SE uses its own); and the official detector functions read a matrix built for
N = 64 whatever N they are given, while we apply `is_cliff`'s test with the real N.

`cliff_table` is the vectorized version over a whole run's teacher table; `cliff_table_reference` is the
plain loop it is tested against (and both against the official code's outputs,
`tests/backend/fixtures/official/cliff_tokens.json`, made by
`scripts/official_fixtures/cliff_tokens.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

DELTA_0 = 0.1
"""The official minimum effect size: a drop must exceed it before the test is even made."""
Z_ALPHA = 1.645
"""One-sided 95% (α = 0.05), the official default."""
SOURCE = (
    "Cliff Tokens, Ko, Kang, Lee (arXiv 2606.25524); official code beaver-22/Cliff-token @ "
    "1df7c3c401380fbe9c68e77af83173c72b10ab88 (src/analysis/cliff_threshold.py is_cliff, "
    "src/analysis/detector.py find_all_cliff_tokens_statistical)"
)
COLUMNS = [
    "rollout_id",
    "start",
    "pos",
    "token",
    "k_prev",
    "n_prev",
    "k",
    "n",
    "p_prev",
    "p",
    "drop",
    "se",
    "threshold",
    "cliff",
    "first",
]


def _counts(values: pd.DataFrame, lengths: dict[int, int] | None) -> pd.DataFrame:
    """rollout_id, pos, k, n sorted by rollout and position; positions at or past a known length dropped."""
    frame = values[["rollout_id", "pos", "value", "n"]].copy()
    frame["rollout_id"] = frame["rollout_id"].astype(np.int64)
    frame["pos"] = frame["pos"].astype(np.int64)
    frame["n"] = frame["n"].astype(np.int64)
    if lengths is not None:
        limit = frame["rollout_id"].map(lengths)
        frame = frame[limit.notna() & (frame["pos"] >= 0) & (frame["pos"] < limit.fillna(0))]
    frame = frame[frame["n"] > 0].sort_values(["rollout_id", "pos"], kind="stable")
    # the official score_to_k: round(score * N) (half to even, as Python's round), clamped to [0, N]
    k = np.rint(frame["value"].to_numpy(np.float64) * frame["n"].to_numpy(np.float64))
    frame["k"] = np.clip(k, 0, frame["n"].to_numpy(np.float64)).astype(np.int64)
    return frame.reset_index(drop=True)


def cliff_table(
    values: pd.DataFrame,
    lengths: dict[int, int] | None = None,
    delta_0: float = DELTA_0,
    z_alpha: float = Z_ALPHA,
) -> pd.DataFrame:
    """Every pair of consecutive valued prefixes of every rollout, with the official test.

    values: the teacher table (`Store.resample_values`: rollout_id, pos, value, n); lengths: rollout id ->
    response length (positions at or past it are ignored; None keeps every position). Returns one row per
    pair (`COLUMNS`): the segment [start, pos), the blamed `token` = pos − 1, counts and rates, the drop,
    its SE, the threshold δ0 + z_α SE, `cliff` (the test) and `first` (the rollout's first cliff).
    """
    c = _counts(values, lengths)
    same = c["rollout_id"].to_numpy()[1:] == c["rollout_id"].to_numpy()[:-1]  # (P - 1,) pair within a rollout
    prev, curr = c.iloc[:-1][same], c.iloc[1:][same]
    k_prev, n_prev = prev["k"].to_numpy(np.int64), prev["n"].to_numpy(np.int64)
    k, n = curr["k"].to_numpy(np.int64), curr["n"].to_numpy(np.int64)
    p_prev, p = k_prev / n_prev, k / n
    drop = p_prev - p
    var = p_prev * (1.0 - p_prev) / n_prev + p * (1.0 - p) / n
    se = np.sqrt(np.where(var > 0, var, 0.0))
    threshold = delta_0 + z_alpha * se
    cliff = (k_prev > 0) & (drop > delta_0) & (drop > threshold)
    out = pd.DataFrame(
        {
            "rollout_id": curr["rollout_id"].to_numpy(),
            "start": prev["pos"].to_numpy(),
            "pos": curr["pos"].to_numpy(),
            "token": curr["pos"].to_numpy() - 1,
            "k_prev": k_prev,
            "n_prev": n_prev,
            "k": k,
            "n": n,
            "p_prev": p_prev,
            "p": p,
            "drop": drop,
            "se": se,
            "threshold": threshold,
            "cliff": cliff,
        }
    )
    ranked = out["cliff"].astype(np.int64).groupby(out["rollout_id"]).cumsum()
    out["first"] = out["cliff"] & (ranked == 1)
    return out.reindex(columns=COLUMNS)


def is_cliff(
    k_prev: int, n_prev: int, k: int, n: int, delta_0: float = DELTA_0, z_alpha: float = Z_ALPHA
) -> bool:
    """The test for one pair, written as the official `is_cliff` (which has one N for both sides)."""
    if k_prev <= 0 or k < 0 or k_prev > n_prev or k > n:
        return False
    p_prev, p = k_prev / n_prev, k / n
    drop = p_prev - p
    if drop <= delta_0:
        return False
    var = p_prev * (1.0 - p_prev) / n_prev + p * (1.0 - p) / n
    se = math.sqrt(var) if var > 0 else 0.0
    return drop > delta_0 + z_alpha * se


def cliff_table_reference(
    values: pd.DataFrame,
    lengths: dict[int, int] | None = None,
    delta_0: float = DELTA_0,
    z_alpha: float = Z_ALPHA,
) -> list[dict]:
    """The plain loop `cliff_table` is tested against: per rollout, per consecutive valued pair, `is_cliff`.
    Rows: rollout_id, start, pos, token, cliff, first."""
    by_rollout: dict[int, list[tuple[int, float, int]]] = {}
    for rid, pos, value, n in zip(
        values["rollout_id"], values["pos"], values["value"], values["n"], strict=True
    ):
        rid, pos, n = int(rid), int(pos), int(n)
        if n <= 0 or (lengths is not None and (rid not in lengths or not 0 <= pos < lengths[rid])):
            continue
        by_rollout.setdefault(rid, []).append((pos, float(value), n))
    rows = []
    for rid in sorted(by_rollout):
        points = sorted(by_rollout[rid], key=lambda x: x[0])
        seen = False
        for (a, v_prev, n_prev), (b, v, n) in zip(points[:-1], points[1:], strict=True):
            k_prev = min(max(int(round(v_prev * n_prev)), 0), n_prev)
            k = min(max(int(round(v * n)), 0), n)
            hit = is_cliff(k_prev, n_prev, k, n, delta_0, z_alpha)
            rows.append(
                {
                    "rollout_id": rid,
                    "start": a,
                    "pos": b,
                    "token": b - 1,
                    "cliff": hit,
                    "first": hit and not seen,
                }
            )
            seen = seen or hit
    return rows


def first_cliffs(table: pd.DataFrame) -> dict[int, tuple[int, int]]:
    """rollout id -> the segment [start, pos) of its first cliff (the cliff token is pos − 1)."""
    first = table[table["first"]]
    return {
        int(r): (int(a), int(b))
        for r, a, b in zip(first["rollout_id"], first["start"], first["pos"], strict=True)
    }


def most_negative_hits(
    cliffs: dict[int, tuple[int, int]], advantages: dict[int, np.ndarray], judged_from: dict[int, int]
) -> dict[int, float]:
    """rollout id -> does the estimator's most negative token sit in the first cliff's segment? Tokens
    from `judged_from[rid]` (the first valued position) to the end are judged; tokens tied at the minimum
    share the hit (1, 0 or the share of the tied tokens inside), so flat credit scores the chance value."""
    hits = {}
    for rid, (a, b) in cliffs.items():
        if rid not in advantages:
            continue
        start = judged_from.get(rid, 0)
        adv = np.asarray(advantages[rid], dtype=np.float64)[start:]
        if not len(adv):
            continue
        lowest = np.isclose(adv, adv.min(), rtol=1e-6, atol=1e-9)
        inside = lowest[max(a - start, 0) : b - start]
        hits[rid] = float(inside.sum()) / float(lowest.sum())
    return hits


def chance_hits(
    cliffs: dict[int, tuple[int, int]], lengths: dict[int, int], judged_from: dict[int, int]
) -> dict[int, float]:
    """What a predictor with no information scores per rollout: the segment's share of the judged tokens."""
    out = {}
    for rid, (a, b) in cliffs.items():
        start = judged_from.get(rid, 0)
        if rid in lengths and lengths[rid] > start:
            out[rid] = (b - max(a, start)) / (lengths[rid] - start)
    return out


@dataclass
class CliffTruth:
    """The first cliff of each valued rollout that has one, as teacher-bench judges it.

    cliffs: rollout id -> segment [start, pos) of its first cliff; judged_from: rollout id -> its first
    valued position (tokens before it are not judged, as in the teacher's segments); lengths: by id."""

    cliffs: dict[int, tuple[int, int]]
    judged_from: dict[int, int]
    lengths: dict[int, int]


def cliff_truth(
    values: pd.DataFrame, lengths: dict[int, int], delta_0: float = DELTA_0, z_alpha: float = Z_ALPHA
) -> CliffTruth:
    """First cliffs of the teacher table `values` (rollout_id, pos, value, n)."""
    table = cliff_table(values, lengths, delta_0, z_alpha)
    counts = _counts(values, lengths)
    judged_from = counts.groupby("rollout_id")["pos"].min()
    return CliffTruth(first_cliffs(table), {int(r): int(p) for r, p in judged_from.items()}, dict(lengths))


def stored_cliffs(
    handle, run: str, rollout_id: int | None = None, delta_0: float = DELTA_0, z_alpha: float = Z_ALPHA
) -> pd.DataFrame:
    """`cliff_table` of the stored Monte Carlo values of `run` (one rollout, or every valued one): the
    numbers `creditlens cliff` prints and the Rollout view marks. With a rollout, `token_text` holds the
    blamed token's text. Empty (with the columns) when nothing is valued."""
    with handle.read() as store:
        values = store.resample_values(run, rollout_id)
        if rollout_id is None:
            index = store.rollout_index(run)
            lengths = dict(zip(index["rollout_id"].astype(int), index["length"].astype(int), strict=True))
            tokens = None
        else:
            row = store.rollout(run, int(rollout_id))
            lengths = {int(rollout_id): len(row["token_ids"])}
            tokens = list(row["tokens"]) if row.get("tokens") is not None else None
    table = cliff_table(values, lengths, delta_0, z_alpha)
    if tokens is not None:
        table["token_text"] = [tokens[t] if 0 <= t < len(tokens) else "" for t in table["token"]]
    return table
