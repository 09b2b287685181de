"""The credit-health monitors' SQL (backend/monitor/monitors.py): per-step statistics the trends table does
not carry, and the rollouts that show a statistic most at one step. Everything reads the per-rollout summaries
(`rollout_summary`, `credit_summary`, and `channel_summary`, which `save_channel_summary` fills once per
estimator key); user values are parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import pyarrow as pa

from backend.store.db import Store
from backend.store.explorer_queries import CreditKey


@dataclass(frozen=True)
class ChannelKey:
    """Which split-channel credit a channel summary describes: the estimator output (the `estimates`
    key's estimator and config hash) put on `channel`, over the first `groups_per_step` groups of each
    step (0: all)."""

    estimator: str
    config_hash: str
    channel: str
    groups_per_step: int

    def params(self) -> list:
        return [self.estimator, self.config_hash, self.channel, int(self.groups_per_step)]


def _credit_where(key: CreditKey) -> tuple[str, list]:
    return (
        "c.estimator = ? AND c.config_hash = ? AND c.channel = ? AND c.classes = ?",
        [key.estimator, key.config_hash, key.channel, list(key.classes)],
    )


def step_signed_shares(store: Store, run_id: int, key: CreditKey) -> pd.DataFrame:
    """One row per step: pos_<k> (class k's share of the step's positive credit Σ max(A, 0)) and neg_<k>
    (of its negative credit Σ max(−A, 0)), k the index into `key.classes`."""
    parts = []
    for k in range(len(key.classes)):
        i = k + 1  # DuckDB lists are 1-based
        parts.append(f"sum(c.class_pos[{i}]) / nullif(sum(list_sum(c.class_pos)), 0) AS pos_{k}")
        parts.append(f"sum(c.class_neg[{i}]) / nullif(sum(list_sum(c.class_neg)), 0) AS neg_{k}")
    where, params = _credit_where(key)
    return store.con.execute(
        f"SELECT s.step, {', '.join(parts)} FROM credit_summary c JOIN rollout_summary s "
        f"ON s.run_id = c.run_id AND s.rollout_id = c.rollout_id WHERE c.run_id = ? AND {where} "
        "GROUP BY s.step ORDER BY s.step",
        [run_id, *params],
    ).df()


def step_logged_gap(store: Store, run_id: int, key: CreditKey) -> pd.DataFrame:
    """step, abs_logged_gap: the mean over the step's rollouts with a logged advantage of |mean A − logged|
    (the Explorer's `logged_gap`, in absolute value)."""
    where, params = _credit_where(key)
    return store.con.execute(
        "SELECT s.step, avg(abs(c.mean_adv - s.logged_advantage)) AS abs_logged_gap FROM credit_summary c "
        "JOIN rollout_summary s ON s.run_id = c.run_id AND s.rollout_id = c.rollout_id "
        f"WHERE c.run_id = ? AND {where} AND s.logged_advantage IS NOT NULL GROUP BY s.step ORDER BY s.step",
        [run_id, *params],
    ).df()


def top_logged_gap(store: Store, run_id: int, key: CreditKey, step: int, n: int) -> list[int]:
    """The `n` rollouts of `step` with the largest |mean A − logged advantage|."""
    where, params = _credit_where(key)
    rows = store.con.execute(
        "SELECT s.rollout_id FROM credit_summary c JOIN rollout_summary s ON s.run_id = c.run_id "
        f"AND s.rollout_id = c.rollout_id WHERE c.run_id = ? AND {where} AND s.step = ? "
        "AND s.logged_advantage IS NOT NULL ORDER BY abs(c.mean_adv - s.logged_advantage) DESC, "
        "s.rollout_id LIMIT ?",
        [run_id, *params, int(step), int(n)],
    ).fetchall()
    return [int(r[0]) for r in rows]


def step_garbled(store: Store, run_id: int) -> pd.DataFrame:
    """step, garbled: the mean over the step's rollouts of the share of response characters that are
    control or replacement characters or lie in a word mixing Latin with another script (the summary's
    `garbled`, explorer_queries.GARBLED_SQL)."""
    return store.con.execute(
        "SELECT step, avg(garbled) AS garbled FROM rollout_summary WHERE run_id = ? GROUP BY step "
        "ORDER BY step",
        [run_id],
    ).df()


def top_garbled(store: Store, run_id: int, step: int, n: int) -> list[int]:
    """The `n` rollouts of `step` with the most garbled text (ties by rollout id), none that is clean."""
    rows = store.con.execute(
        "SELECT rollout_id FROM rollout_summary WHERE run_id = ? AND step = ? AND garbled > 0 "
        "ORDER BY garbled DESC, rollout_id LIMIT ?",
        [run_id, int(step), int(n)],
    ).fetchall()
    return [int(r[0]) for r in rows]


def step_groups(store: Store, run_id: int, per_step: int = 0) -> dict[int, list[int]]:
    """step -> its group ids in order (the first `per_step` of them when per_step > 0), steps in order."""
    rows = store.con.execute(
        "SELECT step, list(DISTINCT group_id ORDER BY group_id) FROM rollout_summary WHERE run_id = ? "
        "GROUP BY step ORDER BY step",
        [run_id],
    ).fetchall()
    return {int(step): [int(g) for g in (ids[:per_step] if per_step > 0 else ids)] for step, ids in rows}


# --- channel_takeover's per-rollout summary (migration 011) -------------------------------------------

_CHANNEL_KEY = (
    "c.run_id = ? AND c.estimator = ? AND c.config_hash = ? AND c.channel = ? AND c.groups_per_step = ?"
)


def save_channel_summary(store: Store, run_id: int, key: ChannelKey, rows: pa.Table) -> None:
    """Replace the channel summary under `key` of the rollouts in `rows` (rollout_id, part_index, part,
    magnitude: Σ_t |β_c·Ã_c| of channel `part` over the rollout). Call inside a transaction."""
    store.con.execute(
        "DELETE FROM channel_summary c WHERE " + _CHANNEL_KEY + " AND list_contains(?, c.rollout_id)",
        [run_id, *key.params(), sorted(set(rows.column("rollout_id").to_pylist()))],
    )
    n = rows.num_rows
    data = rows
    for name, value in (
        ("estimator", key.estimator),
        ("config_hash", key.config_hash),
        ("channel", key.channel),
    ):
        data = data.append_column(name, pa.array([value] * n, pa.string()))
    data = data.append_column("run_id", pa.array([run_id] * n, pa.int32()))
    data = data.append_column("groups_per_step", pa.array([key.groups_per_step] * n, pa.int32()))
    store.insert_arrow("channel_summary", data)


def channel_summary_steps(store: Store, run_id: int, key: ChannelKey) -> set[int]:
    """The steps with a channel summary under `key` (a run that grew lacks its new steps')."""
    rows = store.con.execute(
        "SELECT DISTINCT s.step FROM channel_summary c JOIN rollout_summary s ON s.run_id = c.run_id AND "
        f"s.rollout_id = c.rollout_id WHERE {_CHANNEL_KEY}",
        [run_id, *key.params()],
    ).fetchall()
    return {int(step) for (step,) in rows}


def channel_magnitudes(store: Store, run_id: int, key: ChannelKey) -> pd.DataFrame:
    """step, rollout_id, part_index, part, magnitude: the stored channel summary under `key`, in step,
    rollout and part order."""
    return store.con.execute(
        "SELECT s.step, c.rollout_id, c.part_index, c.part, c.magnitude FROM channel_summary c "
        "JOIN rollout_summary s ON s.run_id = c.run_id AND s.rollout_id = c.rollout_id "
        f"WHERE {_CHANNEL_KEY} ORDER BY s.step, c.rollout_id, c.part_index",
        [run_id, *key.params()],
    ).df()


def step_channel_shares(store: Store, run_id: int, key: ChannelKey) -> pd.DataFrame:
    """step, part_index, part, share: each channel's share of the step's Σ|β_c·Ã_c| (NULL when the step
    has no credit at all), in step and part order."""
    return store.con.execute(
        "SELECT step, part_index, part, total / nullif(sum(total) OVER (PARTITION BY step), 0) AS share "
        "FROM (SELECT s.step, c.part_index, c.part, sum(c.magnitude) AS total FROM channel_summary c "
        "JOIN rollout_summary s ON s.run_id = c.run_id AND s.rollout_id = c.rollout_id "
        f"WHERE {_CHANNEL_KEY} GROUP BY s.step, c.part_index, c.part) ORDER BY step, part_index",
        [run_id, *key.params()],
    ).df()
