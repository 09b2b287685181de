"""The credit-health monitors' SQL (backend/monitor.py): per-step statistics the trends table does not
carry, and the rollouts that show a statistic most at one step. Everything reads the per-rollout summaries
(`rollout_summary`, `credit_summary`) or one pass over the response text; user values are parameters.
"""

from __future__ import annotations

import pandas as pd

from backend.store.db import Store
from backend.store.explorer_queries import CreditKey

# Characters that do not belong in text a policy writes: C0/C1 controls other than tab, newline and
# carriage return, and U+FFFD (what a decoder writes for bytes it cannot read).
_BAD_CHARS = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\x{FFFD}]"
# A word that mixes Latin letters with letters of another script ("pаris" with a Cyrillic а): the mark of
# precision or tokenizer trouble, not of a multilingual answer (whose words each keep to one script).
_OTHER = r"[\p{Cyrillic}\p{Greek}\p{Han}\p{Hiragana}\p{Katakana}\p{Hangul}\p{Arabic}\p{Hebrew}\p{Thai}]"
_MIXED_WORD = rf"\S*(?:\p{{Latin}}\S*{_OTHER}|{_OTHER}\S*\p{{Latin}})\S*"

# Only a response with a character outside printable ASCII (tab, newline, CR aside) can be garbled: one
# cheap scan finds those, and the two replacing scans run on them alone. Measured on the 10M-token bench
# run (plain ASCII): 2.0 s for the two scans over every response, 0.7 s with the filter.
_SUSPECT = r"[^\x09\x0A\x0D\x20-\x7E]"
_GARBLED_SQL = f"""
    SELECT o.rollout_id, s.step,
           CASE WHEN length(o.response) = 0 OR NOT regexp_matches(o.response, '{_SUSPECT}') THEN 0.0 ELSE
             (length(o.response) - length(regexp_replace(o.response, '{_BAD_CHARS}', '', 'g'))
              + length(o.response) - length(regexp_replace(o.response, '{_MIXED_WORD}', '', 'g')))
             / length(o.response) END AS garbled
    FROM rollouts o JOIN rollout_summary s ON s.run_id = o.run_id AND s.rollout_id = o.rollout_id
    WHERE o.run_id = ?
"""


def _credit_where(key: CreditKey) -> tuple[str, list]:
    return ("c.estimator = ? AND c.config_hash = ? AND c.channel = ? AND c.classes = ?",
            [key.estimator, key.config_hash, key.channel, list(key.classes)])


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
        "GROUP BY s.step ORDER BY s.step", [run_id, *params]).df()


def step_logged_gap(store: Store, run_id: int, key: CreditKey) -> pd.DataFrame:
    """step, abs_logged_gap: the mean over the step's rollouts with a logged advantage of |mean A − logged|
    (the Explorer's `logged_gap`, in absolute value)."""
    where, params = _credit_where(key)
    return store.con.execute(
        "SELECT s.step, avg(abs(c.mean_adv - s.logged_advantage)) AS abs_logged_gap FROM credit_summary c "
        "JOIN rollout_summary s ON s.run_id = c.run_id AND s.rollout_id = c.rollout_id "
        f"WHERE c.run_id = ? AND {where} AND s.logged_advantage IS NOT NULL GROUP BY s.step ORDER BY s.step",
        [run_id, *params]).df()


def top_logged_gap(store: Store, run_id: int, key: CreditKey, step: int, n: int) -> list[int]:
    """The `n` rollouts of `step` with the largest |mean A − logged advantage|."""
    where, params = _credit_where(key)
    rows = store.con.execute(
        "SELECT s.rollout_id FROM credit_summary c JOIN rollout_summary s ON s.run_id = c.run_id "
        f"AND s.rollout_id = c.rollout_id WHERE c.run_id = ? AND {where} AND s.step = ? "
        "AND s.logged_advantage IS NOT NULL ORDER BY abs(c.mean_adv - s.logged_advantage) DESC, "
        "s.rollout_id LIMIT ?", [run_id, *params, int(step), int(n)]).fetchall()
    return [int(r[0]) for r in rows]


def step_garbled(store: Store, run_id: int) -> pd.DataFrame:
    """step, garbled: the mean over the step's rollouts of the share of response characters that are
    control or replacement characters or lie in a word mixing Latin with another script."""
    return store.con.execute(
        f"SELECT step, avg(garbled) AS garbled FROM ({_GARBLED_SQL}) GROUP BY step ORDER BY step",
        [run_id]).df()


def top_garbled(store: Store, run_id: int, step: int, n: int) -> list[int]:
    """The `n` rollouts of `step` with the most garbled text (ties by rollout id), none that is clean."""
    rows = store.con.execute(
        f"SELECT rollout_id FROM ({_GARBLED_SQL}) WHERE step = ? AND garbled > 0 "
        "ORDER BY garbled DESC, rollout_id LIMIT ?", [run_id, int(step), int(n)]).fetchall()
    return [int(r[0]) for r in rows]


def step_groups(store: Store, run_id: int, per_step: int = 0) -> dict[int, list[int]]:
    """step -> its group ids in order (the first `per_step` of them when per_step > 0), steps in order."""
    rows = store.con.execute(
        "SELECT step, list(DISTINCT group_id ORDER BY group_id) FROM rollout_summary WHERE run_id = ? "
        "GROUP BY step ORDER BY step", [run_id]).fetchall()
    return {int(step): [int(g) for g in (ids[:per_step] if per_step > 0 else ids)] for step, ids in rows}
