"""The Explorer's SQL: per-rollout summaries and the paged rollout table (the per-step trends over the same
summaries: `backend.store.trend_queries`).

The tables come from migration 003; `Store` deletes them with their run and drops the credit summaries
with the run's cached estimates. Everything here runs inside DuckDB over the stored runs, so a view asks
for one page of rows or one row per step and never loads a run into Python. Values from users (run ids,
estimator keys, channel and class names, filter bounds, search text) are parameters (`?`); the only text
pasted into SQL is column aliases the caller built from `[a-z0-9_]` (checked here) and operators from a
fixed set.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from backend.store import turn_sql
from backend.store.db import Store
from backend.store.excess_sql import excess_sql
from backend.store.runs import MAIN_SCORE_SQL

OPERATORS = ("<=", ">=", "!=", "<", ">", "=")
WINDOW = 16  # tokens per window of the repetition score
# Random odd 64-bit weights of the window hash Σ_j w_j · token_{i+j} (wrapping uint64 arithmetic).
_WINDOW_WEIGHTS = np.random.default_rng(16).integers(1, 2**63, size=WINDOW, dtype=np.uint64) | np.uint64(1)
_ALIAS = re.compile(r"[a-z_][a-z0-9_]*\Z")

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
GARBLED_SQL = f"""
    CASE WHEN length(o.response) = 0 OR NOT regexp_matches(o.response, '{_SUSPECT}') THEN 0.0 ELSE
      (length(o.response) - length(regexp_replace(o.response, '{_BAD_CHARS}', '', 'g'))
       + length(o.response) - length(regexp_replace(o.response, '{_MIXED_WORD}', '', 'g')))
      / length(o.response) END"""
"""A rollout's garbled share (of `rollouts o`), kept in `rollout_summary.garbled`: the share of response
characters that are control or replacement characters or lie in a word mixing Latin with another script
(NULL without a response). Computed once with the summary: the monitors read it on every call."""


def _alias(name: str) -> str:
    if not _ALIAS.match(name):
        raise ValueError(f"column alias {name!r}: expected [a-z_][a-z0-9_]*")
    return f'"{name}"'


# --- filling ---------------------------------------------------------------------------------------


def fill_rollout_summary(store: Store, run_id: int) -> int:
    """(Re)build `rollout_summary` for one run from its rollouts and scores; call inside a transaction.

    reward: the sum of the rollout's channel scores (what a single mixed pipeline optimizes);
    zero_variance: the group has >= 2 rollouts and all have the same score on the run's main channel (what
    a group-relative estimator normalizes; `all`: the summed reward), see `Store.set_main_channel_of`;
    truncated: `meta.truncated`, else `meta.finish_reason = 'length'`, else NULL (unknown);
    repetition: share of the response's 16-token windows equal to an earlier window (NULL under 16 tokens);
    mean_entropy: mean of `entropies`; kl: mean of `logprobs - ref_logprobs` (the sampled k1 estimate of
    KL(policy || reference)), NULL where either list is missing; garbled: see `GARBLED_SQL`.
    Returns the number of rows written.
    """
    con = store.con
    # A rollout's token ids never change, so its repetition (the one part computed in Python) is kept across
    # rebuilds: a run that grew by a step (a live run) has only that step's computed.
    con.execute(
        "CREATE OR REPLACE TEMP TABLE _repetition_kept AS SELECT rollout_id, repetition FROM rollout_summary "
        "WHERE run_id = ?",
        [run_id],
    )
    con.execute("DELETE FROM rollout_summary WHERE run_id = ?", [run_id])
    con.execute(
        f"""
        INSERT INTO rollout_summary
        WITH r AS (
            SELECT rollout_id, sum(score) AS reward, {MAIN_SCORE_SQL} AS main
            FROM scores WHERE run_id = ? GROUP BY rollout_id
        ), base AS (  -- per-rollout scalars first: the window below then carries no lists
            SELECT o.rollout_id, o.group_id, o.step, len(o.token_ids) AS length, r.reward, r.main,
                   coalesce(TRY_CAST(json_extract_string(o.meta, '$.truncated') AS BOOLEAN),
                            json_extract_string(o.meta, '$.finish_reason') = 'length') AS truncated,
                   list_avg(o.entropies) AS mean_entropy,
                   CASE WHEN len(o.logprobs) = len(o.token_ids) AND len(o.ref_logprobs) = len(o.token_ids)
                        THEN list_avg(o.logprobs) - list_avg(o.ref_logprobs) END AS kl,  -- = mean difference
                   o.logged_advantage, {GARBLED_SQL} AS garbled
            FROM rollouts o LEFT JOIN r USING (rollout_id) WHERE o.run_id = ?
        )
        SELECT ?, b.rollout_id, b.group_id, b.step, b.length, b.reward,
               count(*) OVER g >= 2 AND min(b.main) OVER g = max(b.main) OVER g,
               b.truncated, NULL, b.mean_entropy, b.kl, b.logged_advantage, b.garbled
        FROM base b
        WINDOW g AS (PARTITION BY b.group_id)
        """,
        [*store.main_score_params(run_id), run_id, run_id, run_id],
    )
    try:
        con.execute(
            "UPDATE rollout_summary SET repetition = k.repetition FROM _repetition_kept k "
            "WHERE rollout_summary.run_id = ? AND rollout_summary.rollout_id = k.rollout_id",
            [run_id],
        )
        _fill_repetition(store, run_id)
    finally:
        con.execute("DROP TABLE IF EXISTS _repetition_kept")
    return summary_rows(store, run_id)


def _fill_repetition(store: Store, run_id: int, chunk_tokens: int = 4_000_000) -> None:
    """repetition of the rollouts not in `_repetition_kept` (`fill_rollout_summary`), a few million tokens
    at a time.
    Measured: DuckDB's list lambdas took 27 s per million tokens for the 16-token windows (a hash of each
    slice); this vectorized version hashes every window at once as Σ_j w_j · token_{i+j} (random odd 64-bit
    weights, wrapping arithmetic) and counts repeats with one sort, well under a second per million tokens."""
    bounds = store.con.execute(
        "SELECT rollout_id, len(token_ids) FROM rollouts WHERE run_id = ? AND rollout_id NOT IN "
        "(SELECT rollout_id FROM _repetition_kept) ORDER BY rollout_id",
        [run_id],
    ).fetchnumpy()
    ids, lengths = bounds["rollout_id"], bounds["len(token_ids)"].astype(np.int64)
    start = 0
    while start < len(ids):
        stop = start + max(1, int(np.searchsorted(np.cumsum(lengths[start:]), chunk_tokens)))
        table = store.con.sql(
            "SELECT rollout_id, token_ids FROM rollouts WHERE run_id = ? AND rollout_id BETWEEN ? AND ? "
            "ORDER BY rollout_id",
            params=[run_id, int(ids[start]), int(ids[stop - 1])],
        ).to_arrow_table()
        values = pa.table(
            {"rollout_id": table.column("rollout_id"), "repetition": _repetition(table.column("token_ids"))}
        )
        view = f"_repetition_{threading.get_ident()}"
        store.con.register(view, values)
        try:
            store.con.execute(
                f"UPDATE rollout_summary SET repetition = r.repetition FROM {view} r "
                "WHERE rollout_summary.run_id = ? AND rollout_summary.rollout_id = r.rollout_id",
                [run_id],
            )
        finally:
            store.con.unregister(view)
        start = stop


def _repetition(token_ids: pa.ChunkedArray, cells_per_sort: int = 1 << 20) -> pa.Array:
    """Share of each list's WINDOW-token windows equal to an earlier window of that list (NULL if none).
    Measured on 2M tokens of the bench run: 0.45 s with the windows gathered token by token and one stable
    argsort of every window salted by its rollout; 0.1 s with the digests of all windows from 16 shifted
    slices and each rollout's digests sorted in its own row (rows of similar length padded together)."""
    lists = token_ids.combine_chunks()
    lengths = lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)  # (B,)
    n_windows = np.maximum(lengths - WINDOW + 1, 0)  # (B,)
    if n_windows.sum() == 0:
        return pa.array([None] * len(lengths), pa.float64())
    flat = lists.flatten().to_numpy(zero_copy_only=False).astype(np.uint64)  # (N,)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])  # (B,)
    with np.errstate(over="ignore"):
        digest = np.zeros(len(flat) - WINDOW + 1, dtype=np.uint64)  # (N - W + 1,) the window at each token
        for j in range(WINDOW):
            digest += flat[j : len(digest) + j] * _WINDOW_WEIGHTS[j]
    repeats = np.zeros(len(lengths), dtype=np.int64)  # (B,) windows equal to an earlier one of the rollout
    by_windows = np.argsort(n_windows, kind="stable")
    by_windows = by_windows[n_windows[by_windows] > 0]
    ordered = n_windows[by_windows]  # ascending
    first = 0
    while first < len(by_windows):
        # as many rows as keep the (R, C) table within `cells_per_sort` cells (C: the widest row's windows):
        # short rollouts sort thousands at once (256 a step was most of the summary of 307k of ~40 tokens)
        guess = ordered[min(first + max(1, cells_per_sort // ordered[first]), len(ordered)) - 1]
        stop = first + max(1, cells_per_sort // int(guess))
        rows = by_windows[first:stop]  # (R,)
        first = stop
        counts = n_windows[rows]  # (R,) ascending
        column = np.arange(counts[-1])
        inside = column < counts[:, None]  # (R, C)
        # Padding is the largest digest: it sorts last, so a row's first `count` entries are its own.
        table = np.full(inside.shape, np.iinfo(np.uint64).max, dtype=np.uint64)  # (R, C)
        table[inside] = digest[(starts[rows][:, None] + column)[inside]]
        table.sort(axis=1)
        repeats[rows] = ((table[:, 1:] == table[:, :-1]) & inside[:, 1:]).sum(axis=1)
    share = np.where(n_windows > 0, repeats / np.maximum(n_windows, 1), np.nan)
    return pa.array(share, pa.float64(), mask=n_windows == 0)


def summary_rows(store: Store, run_id: int) -> int:
    return int(
        store.con.execute("SELECT count(*) FROM rollout_summary WHERE run_id = ?", [run_id]).fetchall()[0][0]
    )


def summary_tokens(store: Store, run_id: int) -> int:
    """The run's tokens by its Explorer summaries (0 where a store predates them)."""
    query = "SELECT coalesce(sum(length), 0) FROM rollout_summary WHERE run_id = ?"
    return int(store.con.execute(query, [run_id]).fetchall()[0][0])


def rollout_count(store: Store, run_id: int) -> int:
    return int(store.con.execute("SELECT count(*) FROM rollouts WHERE run_id = ?", [run_id]).fetchall()[0][0])


@dataclass(frozen=True)
class CreditKey:
    """Which estimator output a credit summary describes (the `estimates` key) and its class list."""

    estimator: str
    config_hash: str
    channel: str
    classes: tuple[str, ...]


def save_credit_summary(store: Store, run_id: int, key: CreditKey, rows: pa.Table) -> None:
    """Replace the credit summary of `rows`' rollouts. rows: rollout_id, abs_total, max_abs, mean_adv,
    class_abs, class_pos, class_neg, class_tokens. Call inside a transaction."""
    n = rows.num_rows
    # Whole columns from one value each, and the rollouts to replace as a registered table: a python list
    # per rollout here was most of the save on a run of many short rollouts (1.0 of 2.3 s for 307k).
    data = rows.append_column("run_id", pa.array(np.full(n, run_id, dtype=np.int32)))
    for name, value in (
        ("estimator", key.estimator),
        ("config_hash", key.config_hash),
        ("channel", key.channel),
    ):
        data = data.append_column(name, pa.repeat(pa.scalar(value, pa.string()), n))
    width = len(key.classes)
    classes = pa.ListArray.from_arrays(
        pa.array(np.arange(n + 1, dtype=np.int32) * width),
        pa.array(list(key.classes), pa.string()).take(pa.array(np.tile(np.arange(width), n))),
    )
    data = data.append_column("classes", classes)
    view = f"_credit_ids_{threading.get_ident()}"
    store.con.register(view, rows.select(["rollout_id"]))
    try:
        store.con.execute(
            "DELETE FROM credit_summary WHERE run_id = ? AND estimator = ? AND config_hash = ? "
            f"AND channel = ? AND classes = ? AND rollout_id IN (SELECT rollout_id FROM {view})",
            [run_id, key.estimator, key.config_hash, key.channel, list(key.classes)],
        )
    finally:
        store.con.unregister(view)
    store.insert_arrow("credit_summary", data)


def credit_summary_rows(store: Store, run_id: int, key: CreditKey) -> int:
    return int(
        store.con.execute(
            "SELECT count(*) FROM credit_summary WHERE run_id = ? AND estimator = ? AND config_hash = ? "
            "AND channel = ? AND classes = ?",
            [run_id, key.estimator, key.config_hash, key.channel, list(key.classes)],
        ).fetchall()[0][0]
    )


def credit_summary_ids(store: Store, run_id: int, key: CreditKey) -> set[int]:
    """The rollouts with a credit summary under `key`."""
    rows = store.con.execute(
        "SELECT rollout_id FROM credit_summary WHERE run_id = ? AND estimator = ? AND config_hash = ? "
        "AND channel = ? AND classes = ?",
        [run_id, key.estimator, key.config_hash, key.channel, list(key.classes)],
    ).fetchall()
    return {int(r) for (r,) in rows}


def estimate_rows(store: Store, run_id: int, estimator: str, config_hash: str, channel: str) -> int:
    return int(
        store.con.execute(
            "SELECT count(*) FROM estimates WHERE run_id = ? AND estimator = ? AND config_hash = ? "
            "AND channel = ?",
            [run_id, estimator, config_hash, channel],
        ).fetchall()[0][0]
    )


def run_metrics(store: Store, run_id: int) -> list[str]:
    """Names of the run's per-rollout metrics (migration 008), sorted."""
    return [
        r[0]
        for r in store.con.execute(
            "SELECT DISTINCT name FROM rollout_metrics WHERE run_id = ? ORDER BY name", [run_id]
        ).fetchall()
    ]


def run_channels(store: Store, run_id: int) -> list[str]:
    return [
        r[0]
        for r in store.con.execute(
            "SELECT DISTINCT channel FROM scores WHERE run_id = ? ORDER BY channel", [run_id]
        ).fetchall()
    ]


def has_logged_advantage(store: Store, run_id: int) -> bool:
    return bool(
        store.con.execute(
            "SELECT count(logged_advantage) > 0 FROM rollouts WHERE run_id = ?", [run_id]
        ).fetchall()[0][0]
    )


def has_turns(store: Store, run_id: int) -> bool:
    """Whether any rollout of the run has turns (an agent run: the table gets `turn_sql`'s columns)."""
    query = "SELECT count(turns) > 0 FROM rollouts WHERE run_id = ?"
    return bool(store.con.execute(query, [run_id]).fetchall()[0][0])


def has_ref_logprobs(store: Store, run_id: int) -> bool:
    return bool(
        store.con.execute("SELECT count(kl) > 0 FROM rollout_summary WHERE run_id = ?", [run_id]).fetchall()[
            0
        ][0]
    )


# --- the rollout table -------------------------------------------------------------------------------


@dataclass(frozen=True)
class TableSpec:
    """What the rollout table holds. score_columns/class_columns: (alias, channel or class) pairs;
    credit: the estimator output of the share columns (None: no credit columns); compare: the second
    output of the Spearman column; logged_gap: add `mean A - logged advantage`; metric_columns: (alias,
    metric) pairs of the run's per-rollout metrics; signed_columns: (alias, "pos" or "neg", class): the
    class's share of the rollout's positive (negative) credit."""

    run_id: int
    score_columns: tuple[tuple[str, str], ...]
    credit: CreditKey | None = None
    class_columns: tuple[tuple[str, str], ...] = ()
    compare: CreditKey | None = None
    logged_gap: bool = False
    metric_columns: tuple[tuple[str, str], ...] = ()
    signed_columns: tuple[tuple[str, str, str], ...] = ()  # (alias, "pos" or "neg", class)
    excess_columns: tuple[tuple[str, str, str], ...] = ()  # (alias, "", "pos" or "neg", class): excess_sql
    estimate: CreditKey | None = None
    """The estimator output behind `credit` when that is A_final: the Spearman, logged gap and quantiles."""
    turn_columns: bool = False
    """Add an agent run's turn counts and, with `credit`, its credit by turn (`backend.store.turn_sql`)."""


def metrics_select(spec: TableSpec, aggregate: str) -> tuple[str, list]:
    """`aggregate(value) FILTER (WHERE name = ?) AS <alias>` per metric column, and its parameters."""
    select = ", ".join(
        f"{aggregate}(m.value) FILTER (WHERE m.name = ?) AS {_alias(a)}" for a, _ in spec.metric_columns
    )
    return select, [name for _, name in spec.metric_columns]


_SIGNED = {"pos": "class_pos", "neg": "class_neg"}  # the credit summary's list of each sign


def _table_sql(spec: TableSpec) -> tuple[str, list]:
    """The full (unpaged) rollout table as a SQL query with its parameters."""
    params: list = []
    score_select = (
        ", ".join(f"max(score) FILTER (WHERE channel = ?) AS {_alias(a)}" for a, _ in spec.score_columns)
        or "NULL AS _none"
    )
    params += [c for _, c in spec.score_columns]
    params.append(spec.run_id)
    cols = ["s.rollout_id", "s.step", "s.group_id", "s.length"]
    cols += turn_sql.count_columns() if spec.turn_columns else []
    cols += [f"sc.{_alias(a)}" for a, _ in spec.score_columns]
    cols += [f"m.{_alias(a)}" for a, _ in spec.metric_columns]
    cols += ["s.reward", "s.zero_variance", "s.truncated", "s.repetition", "s.mean_entropy", "s.kl"]
    joins = ""
    join_params: list = []
    if spec.turn_columns:
        joins += turn_sql.counts_join()
        join_params.append(spec.run_id)
    if spec.metric_columns:
        select, names = metrics_select(spec, "max")
        joins += (
            f" LEFT JOIN (SELECT m.rollout_id, {select} FROM rollout_metrics m WHERE m.run_id = ? "
            "GROUP BY m.rollout_id) m ON m.rollout_id = s.rollout_id"
        )
        join_params += [*names, spec.run_id]
    if spec.credit is not None:
        for alias, name in spec.class_columns:
            index = spec.credit.classes.index(name) + 1  # DuckDB lists are 1-based
            cols.append(f"c.class_abs[{int(index)}] / nullif(c.abs_total, 0) AS {_alias(alias)}")
        for alias, sign, name in spec.signed_columns:
            index, column = spec.credit.classes.index(name) + 1, _SIGNED[sign]
            cols.append(f"c.{column}[{int(index)}] / nullif(list_sum(c.{column}), 0) AS {_alias(alias)}")
        for alias, sign, name in spec.excess_columns:
            cols.append(f"{excess_sql(spec.credit.classes.index(name) + 1, sign)} AS {_alias(alias)}")
        cols += turn_sql.share_columns() if spec.turn_columns else []
        cols.append("c.max_abs")
        k, e = spec.credit, spec.estimate or spec.credit
        if spec.logged_gap:
            cols.append(f"{'e' if spec.estimate else 'c'}.mean_adv - s.logged_advantage AS logged_gap")
        for t, key in (("c", k), ("e", spec.estimate)):
            if key is not None:
                joins += (
                    f" LEFT JOIN credit_summary {t} ON {t}.run_id = s.run_id "
                    f"AND {t}.rollout_id = s.rollout_id AND {t}.estimator = ? AND {t}.config_hash = ? "
                    f"AND {t}.channel = ? AND {t}.classes = ?"
                )
                join_params += [key.estimator, key.config_hash, key.channel, list(key.classes)]
        k = e  # the Spearman compares estimator outputs
        if spec.compare is not None:
            cols.append("a.spearman")
            joins += (
                " LEFT JOIN credit_agreement a ON a.run_id = s.run_id AND a.rollout_id = s.rollout_id "
                "AND a.estimator_a = ? AND a.hash_a = ? AND a.estimator_b = ? AND a.hash_b = ? "
                "AND a.channel = ?"
            )
            b = spec.compare
            join_params += [k.estimator, k.config_hash, b.estimator, b.config_hash, k.channel]
    sql = (
        f"SELECT {', '.join(cols)} FROM rollout_summary s "
        f"LEFT JOIN (SELECT rollout_id, {score_select} FROM scores WHERE run_id = ? GROUP BY rollout_id) sc "
        f"USING (rollout_id){joins} WHERE s.run_id = ?"
    )
    return sql, params + join_params + [spec.run_id]


def table_columns(store: Store, spec: TableSpec) -> list[str]:
    sql, params = _table_sql(spec)
    return [d[0] for d in store.con.execute(f"SELECT * FROM ({sql}) LIMIT 0", params).description]


ROW_CAP = 2**62  # a LIMIT or OFFSET past any table's rows


def rollout_table(
    store: Store,
    spec: TableSpec,
    sort: str = "rollout_id",
    descending: bool = False,
    search: str = "",
    filters: tuple[tuple[str, str, object], ...] = (),
    limit: int | None = None,
    offset: int = 0,
    preview_chars: int = 80,
) -> tuple[pd.DataFrame, int]:
    """One page of the rollout table and the number of rows that pass the search and filters.

    sort: a column of the table (NULLs last, ties by rollout id); search: case-insensitive substring of
    the prompt or the response; filters: (column, operator, value) with operators from OPERATORS.
    The page gets a `preview` column: the response's first `preview_chars` characters.
    """
    sql, params = _table_sql(spec)
    where, where_params = [], []
    for column, op, value in filters:
        if op not in OPERATORS:
            raise ValueError(f"filter operator {op!r}: use one of {' '.join(OPERATORS)}")
        where.append(f"t.{_alias(column)} {op} ?")
        where_params.append(value)
    if search:
        where.append(
            "t.rollout_id IN (SELECT rollout_id FROM rollouts WHERE run_id = ? AND "
            "(contains(lower(prompt), ?) OR contains(lower(response), ?)))"
        )
        where_params += [spec.run_id, search.lower(), search.lower()]
    cond = f"WHERE {' AND '.join(where)}" if where else ""

    def order(table: str) -> str:
        return f"{table}.{_alias(sort)} {'DESC' if descending else 'ASC'} NULLS LAST, {table}.rollout_id"

    # OFFSET applies with or without a LIMIT: a page past the start is still a page (rows from `offset` on).
    # Both are capped below DuckDB's BIGINT: past the table's rows any larger number selects the same.
    page = (
        f"LIMIT {min(int(limit), ROW_CAP)} " if limit is not None else ""
    ) + f"OFFSET {min(int(offset), ROW_CAP)}"
    full = (
        f"WITH t AS ({sql}), hits AS (SELECT t.*, count(*) OVER () AS _total FROM t {cond} "
        f"ORDER BY {order('t')} {page}) SELECT hits.*, left(o.response, ?) AS preview FROM hits "
        f"LEFT JOIN rollouts o ON o.run_id = ? AND o.rollout_id = hits.rollout_id ORDER BY {order('hits')}"
    )
    frame = store.con.execute(full, params + where_params + [int(preview_chars), spec.run_id]).df()
    if len(frame):
        total = int(frame["_total"].iloc[0])
    else:
        total = int(
            store.con.execute(
                f"WITH t AS ({sql}) SELECT count(*) FROM t {cond}", params + where_params
            ).fetchall()[0][0]
        )
    return frame.drop(columns=["_total"]), total


def column_ranges(store: Store, spec: TableSpec, columns: list[str]) -> dict[str, tuple[float, float]]:
    """min and max of numeric columns over the whole table (the filter sliders' bounds)."""
    if not columns:
        return {}
    sql, params = _table_sql(spec)
    parts = ", ".join(f"min(t.{_alias(c)}), max(t.{_alias(c)})" for c in columns)
    row = store.con.execute(f"WITH t AS ({sql}) SELECT {parts} FROM t", params).fetchall()[0]
    return {c: (row[2 * i], row[2 * i + 1]) for i, c in enumerate(columns)}
