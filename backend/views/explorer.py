"""The run explorer: one row per rollout (sortable, filterable, searchable, paged) and trends over steps.

`rollout_table` and `step_trends` are what the Explorer and Trends views show and what `creditlens
rollouts` / `creditlens trends` print. Both are SQL over small per-rollout summary tables (migration 003):
`rollout_summary` (filled at import), `credit_summary` (filled when an estimator's output is saved, by
`backend.credit.estimates`) and `credit_agreement` (filled on the first request for a pair of estimators).
`prepare` makes sure the summaries a query needs exist, computing the estimator outputs at their declared
scope through the store's cache (so the share columns describe exactly what `creditlens estimate` gives).

Columns: rollout_id, step, group_id, length, turns, assistant_turns and tool_calls (agent runs: rollouts with
turns; tool calls count the tool and environment turns), score_<channel>..., metric_<name>... (the run's
per-rollout metrics, migration 008: numbers logged beside the reward, never summed into it), reward (sum of
channel scores), zero_variance, truncated, repetition, mean_entropy, kl; with an estimator share_<class>...
(of Σ|A|), pos_share_<class>... and neg_share_<class>... (of the positive and of the negative credit),
excess_<class>... (share of |A| − share of tokens: 0 over the classes of a rollout;
`excess_pos_`/`excess_neg_` its signed parts), on an agent run turn_share_first, turn_share_last and
turn_share_calls (the first and the last assistant turn's share of Σ|A| and that of the turns that called a
tool: backend/store/turn_sql.py), max_abs, logged_gap (only when the run has a logged advantage), spearman
(with a second estimator); and `preview`. The credit is A_final by default (`credit="final"`: Σ_c β_c·Ã_c,
what the Rollout view colours, backend/credit/final_credit.py), or the estimator's output on its channel
(`credit="channel"`); the Spearman, logged gap and quantiles are always of the estimator's output.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pandas as pd

from backend.core.errors import InputError
from backend.credit import main_channel
from backend.store import Store, StoreHandle, agreement_sql, trend_queries
from backend.store import explorer_queries as queries
from backend.store.explorer_queries import OPERATORS, CreditKey, TableSpec
from backend.store.handle import StoreBusy

if TYPE_CHECKING:
    from backend.credit import estimates

FLAG_COLUMNS = ("zero_variance", "truncated")
CREDITS = ("final", "channel")
"""What the share columns describe: A_final (the default) or the estimator's output on its channel."""
Progress = Callable[[int, int, str], None]


def column_name(prefix: str, name: str) -> str:
    """`score_<channel>` / `share_<class>` / `metric_<name>`: lower case, every run of other characters as
    one `_`."""
    slug = re.sub(r"[^a-z0-9]+", "_", str(name).lower()).strip("_") or "x"
    return f"{prefix}_{slug}"


def unique_columns(prefix: str, names: list[str]) -> tuple[tuple[str, str], ...]:
    """(column, name) for each name: `column_name(prefix, name)`, made unique in order."""
    out, seen = [], set()
    for name in names:
        alias = column_name(prefix, name)
        while alias in seen:  # two channels that differ only in punctuation
            alias += "_"
        seen.add(alias)
        out.append((alias, name))
    return tuple(out)


@dataclass(frozen=True)
class Filter:
    """`column op value`, op one of OPERATORS; value a number or a bool (flags)."""

    column: str
    op: str
    value: float | bool

    def as_tuple(self) -> tuple[str, str, Any]:
        return self.column, self.op, self.value


_WHERE = re.compile(r"\s*([a-z_][a-z0-9_]*)\s*(<=|>=|!=|<|>|=)\s*(\S+)\s*\Z")


def parse_filters(texts: list[str] | tuple[str, ...]) -> tuple[Filter, ...]:
    """Every filter of `--where` options, each one filter or several joined by commas (`step=3,reward>=0.2`:
    all must hold), as `creditlens histogram` and the Explorer's `?where=` write them."""
    return tuple(parse_where(part) for text in texts for part in (text or "").split(","))


def parse_where(text: str) -> Filter:
    """`length>=100`, `share_other>0.5`, `zero_variance=true` -> Filter (InputError names the problem)."""
    match = _WHERE.match(text or "")
    if not match:
        raise InputError(
            f"--where {text!r}: expected COLUMN OP VALUE with OP one of {' '.join(OPERATORS)}, "
            "e.g. length>=100 or zero_variance=true"
        )
    column, op, raw = match.groups()
    if raw.lower() in ("true", "false"):
        return Filter(column, op, raw.lower() == "true")
    try:
        return Filter(column, op, float(raw))
    except ValueError:
        raise InputError(f"--where {text!r}: {raw!r} is not a number or true/false") from None


@dataclass(frozen=True)
class ExplorerQuery:
    """What the table shows. estimator/config: the output whose credit shares are shown (None: no credit
    columns); compare/compare_config: a second output for the Spearman column; sort: a column, descending
    when `descending`; search: substring of prompt or response (case-insensitive); limit/offset: a page
    (limit None: every row)."""

    estimator: str | None = None
    config: tuple = ()
    compare: str | None = None
    compare_config: tuple = ()
    sort: str = "rollout_id"
    descending: bool = False
    search: str = ""
    filters: tuple[Filter, ...] = ()
    limit: int | None = 50
    offset: int = 0
    credit: str = "final"
    """The share columns' credit: "final" (A_final) or "channel" (the estimator's output on its channel)."""
    betas: tuple = ()
    """(channel, β) pairs overriding the run's β in A_final (a tuned β; `--beta C=X`); credit "final" only."""


@dataclass
class ExplorerPage:
    rows: pd.DataFrame
    total: int
    columns: list[str]
    notes: list[str] = field(default_factory=list)
    in_run: int | None = None
    """The run's rollouts when a search or filter narrowed `total` (None: `total` is every rollout)."""


def _key(
    store: Store, run: str, name: str, config: tuple, credit: str = "channel", betas: tuple = ()
) -> tuple[CreditKey, Any]:
    """The credit summaries' key of estimator `name` with `config` (on the run's main channel unless the
    config names a channel); credit "final": of A_final with that estimator (and `betas`, a tuned β)."""
    # On use: the estimators (torch) load only when a query names one; the table without credit columns
    # is SQL over the summaries (`creditlens rollouts` without --estimator never imports torch).
    from backend.credit import (  # noqa: PLC0415 - heavy (torch); only with an estimator
        credit_summary,
        estimates,
        final_credit,
    )
    from backend.estimators import registry  # noqa: PLC0415 - heavy (torch, every estimator); idem

    try:
        on_main = main_channel.on_channel(name, config, store.main_channel(run))
        built = registry.make_config(name, **dict(on_main))
    except registry.UnknownEstimator as exc:
        raise InputError(str(exc)) from None
    except ValueError as exc:
        raise InputError(f"estimator {name!r}: {exc}") from None
    if credit not in CREDITS:
        raise InputError(f"credit={credit!r}: one of {', '.join(CREDITS)}")
    if betas and credit != "final":
        raise InputError("--beta: a β weighs the channels of A_final; it needs --credit final")
    for c, b in betas:
        if not (isinstance(b, (int, float)) and 0 <= b < float("inf")):
            raise InputError(f"--beta {c}={b}: β is a number ≥ 0")
    channel = estimates.channel_key(built)
    key = CreditKey(
        name,
        registry.config_hash(name, built),
        final_credit.final_channel(channel, betas) if credit == "final" else channel,
        credit_summary.credit_classes(store, run),
    )
    return key, built


def credit_key(store: Store, run: str, name: str, config: tuple) -> CreditKey:
    """The credit summaries' key of estimator `name` with `config` (the run's main channel unless the
    config names one): what the monitors read beside the table."""
    return _key(store, run, name, config)[0]


def logged_gap_available(store: Store, run: str) -> bool:
    """Whether the table gets `logged_gap` (mean recomputed A − the trainer's logged advantage): only for
    runs that carry a logged advantage (TRL logs); the hook for a `logged` estimator to build on."""
    return queries.has_logged_advantage(store, store.run_id(run))


def _spec(
    store: Store,
    run: str,
    estimator: str | None,
    config: tuple,
    compare: str | None,
    compare_config: tuple,
    credit: str = "final",
    betas: tuple = (),
) -> TableSpec:
    run_id = store.run_id(run)
    scores = unique_columns("score", queries.run_channels(store, run_id))
    metrics = unique_columns("metric", queries.run_metrics(store, run_id))
    turns = queries.has_turns(store, run_id)
    if estimator is None:
        if compare is not None:
            raise InputError("--compare needs --estimator (the Spearman is between the two)")
        return TableSpec(run_id, scores, metric_columns=metrics, turn_columns=turns)
    key, _ = _key(store, run, estimator, config, credit, betas)
    own = _key(store, run, estimator, config)[0] if credit == "final" else None
    other = _key(store, run, compare, compare_config)[0] if compare is not None else None
    if other is not None and other.channel != (own or key).channel:
        raise InputError(f"--compare {compare}: its channel {other.channel!r} differs from {key.channel!r}")
    signed = tuple(
        (alias, sign, name)
        for sign in ("pos", "neg")
        for alias, name in unique_columns(f"{sign}_share", list(key.classes))
    )
    return TableSpec(
        run_id,
        scores,
        key,
        unique_columns("share", list(key.classes)),
        other,
        logged_gap_available(store, run),
        metrics,
        signed,
        turn_columns=turns,
        excess_columns=tuple(
            (alias, sign, name)
            for sign in ("", "pos", "neg")
            for alias, name in unique_columns("_".join(filter(None, ("excess", sign))), list(key.classes))
        ),
        estimate=own,
    )


def prepare(
    handle: StoreHandle,
    run: str,
    estimator: str | None = None,
    config: tuple = (),
    compare: str | None = None,
    compare_config: tuple = (),
    progress: Progress | None = None,
    credit: str = "final",
    betas: tuple = (),
) -> list[str]:
    """Fill the summaries a query needs that the store lacks (stores older than migration 003, estimator
    outputs not yet computed, a new pair of estimators, A_final's with `credit` "final"); returns notes for
    the user. Opens one read connection when nothing is missing; writes to the store otherwise."""
    notes: list[str] = []
    wanted = [(estimator, config)] if estimator is not None else []
    wanted += [(compare, compare_config)] if compare is not None and estimator is not None else []
    with handle.read() as store:  # one look at what exists
        run_id = store.run_id(run)
        n = queries.rollout_count(store, run_id)
        missing_summary = queries.summary_rows(store, run_id) != n
        keys = []
        for name, cfg in wanted:
            key, built = _key(store, run, name, cfg)
            cached = queries.estimate_rows(store, run_id, key.estimator, key.config_hash, key.channel)
            complete = queries.credit_summary_rows(store, run_id, key) == n and cached == n
            keys.append((key, built, complete))
        agreement = (
            len(keys) == 2 and agreement_sql.agreement_rows(store, run_id, keys[0][0], keys[1][0]) == n
        )
        final = None
        if estimator is not None and credit == "final":
            final, _ = _key(store, run, estimator, config, credit, betas)
            final = None if queries.credit_summary_rows(store, run_id, final) == n else final
    if missing_summary:
        with handle.write() as store, store.transaction():
            queries.fill_rollout_summary(store, run_id)
    for key, built, complete in keys:
        if complete:
            continue
        # The whole run at the estimator's scope; saving it also saves its credit summary.
        from backend.credit import estimates  # noqa: PLC0415 - heavy (torch); only when an output is missing

        scoped = estimates.estimate_rollouts(handle, run, key.estimator, built, progress=progress)
        notes += scoped.notes
        with handle.read() as store:
            have = queries.credit_summary_rows(store, run_id, key)
        if have != n:  # read from a cache filled before the credit summaries existed
            _fill_credit_from_cache(handle, run, key, scoped)
    if final is not None:
        from backend.credit import final_credit  # noqa: PLC0415 - heavy (torch); only when A_final's is missing

        on_main = main_channel.on_channel(estimator, config, keys[0][0].channel)
        notes += final_credit.fill(handle, run, final, estimator, on_main, progress, betas)
    if len(keys) == 2 and not (agreement and all(c for _, _, c in keys)):
        try:
            with handle.write() as store, store.transaction():
                agreement_sql.fill_agreement(store, run_id, keys[0][0], keys[1][0])
        except StoreBusy:
            notes.append("the store is busy; the Spearman column is empty until the next try")
    return notes


def _fill_credit_from_cache(
    handle: StoreHandle, run: str, key: CreditKey, scoped: estimates.ScopedEstimate
) -> None:
    """Credit summaries from cached advantages, one step at a time (bounded memory)."""
    from backend.credit import credit_summary  # noqa: PLC0415 - heavy (torch); only when summaries are missing

    rows = []
    with handle.read() as store:
        steps = sorted(
            store.con.execute(
                "SELECT DISTINCT step FROM rollout_summary WHERE run_id = ?", [store.run_id(run)]
            ).fetchall()
        )
        for (step,) in steps:
            batch = store.load_batch(run, steps=[int(step)])
            padded = scoped.padded(batch.rollout_ids.tolist(), batch.T)
            rows.append(
                credit_summary.credit_rows(batch, padded, key.classes, credit_summary.run_classes(store, run))
            )
    try:
        with handle.write() as store, store.transaction():
            credit_summary.save(store, run, key, rows)
    except StoreBusy:
        pass  # another process is writing; the next call fills it


CREDIT_PREFIXES = ("share_", "pos_share_", "neg_share_")  # the columns an estimator's credit fills


def _check_column(column: str, columns: list[str], what: str, query: ExplorerQuery | None = None) -> None:
    if column in columns:
        return
    hint = ""
    if (
        query is not None
        and query.estimator is None
        and (column.startswith(CREDIT_PREFIXES) or column in ("max_abs", "logged_gap", "spearman"))
    ):
        hint = " (credit columns come with an estimator: add --estimator NAME, e.g. --estimator grpo)"
    elif query is not None and query.compare is None and column == "spearman":
        hint = " (spearman compares two estimators: add --compare NAME)"
    raise InputError(f"{what} {column!r}: not a column of this table{hint}; columns: {', '.join(columns)}")


def rollout_table(
    handle: StoreHandle, run: str, query: ExplorerQuery = ExplorerQuery(), *, prepare_missing: bool = True
) -> ExplorerPage:
    """One page of the Explorer's rollout table (see the module docstring for the columns)."""
    notes = (
        prepare(
            handle,
            run,
            query.estimator,
            query.config,
            query.compare,
            query.compare_config,
            credit=query.credit,
            betas=query.betas,
        )
        if prepare_missing
        else []
    )
    with handle.read() as store:
        spec = _spec(
            store,
            run,
            query.estimator,
            query.config,
            query.compare,
            query.compare_config,
            query.credit,
            query.betas,
        )
        columns = queries.table_columns(store, spec)
        _check_column(query.sort, columns, "--sort", query)
        for f in query.filters:
            _check_column(f.column, columns, "--where", query)
            if f.op not in OPERATORS:
                raise InputError(f"--where: operator {f.op!r}; use one of {' '.join(OPERATORS)}")
            _check_value(f)
        # Named as a Python caller writes them; the command line's `--limit`/`--offset` refuse these first.
        if query.limit is not None and query.limit < 1:
            raise InputError(f"limit={query.limit}: at least 1 row (None: every row)")
        if query.offset < 0:
            raise InputError(f"offset={query.offset}: at least 0")
        rows, total = queries.rollout_table(
            store,
            spec,
            query.sort,
            query.descending,
            query.search.strip(),
            tuple(f.as_tuple() for f in query.filters),
            query.limit,
            query.offset,
        )
        narrowed = bool(query.filters or query.search.strip())
        in_run = queries.rollout_count(store, spec.run_id) if narrowed else None
    return ExplorerPage(rows, total, columns + ["preview"], notes, in_run)


def _check_value(f: Filter) -> None:
    """A flag compares with true/false by = or !=, every other column with a number (DuckDB refuses the rest
    mid-query)."""
    value = str(f.value).lower() if isinstance(f.value, bool) else f"{f.value:g}"
    text = f"--where '{f.column}{f.op}{value}'"
    if f.column in FLAG_COLUMNS and not (isinstance(f.value, bool) and f.op in ("=", "!=")):
        raise InputError(f"{text}: {f.column} is a flag; write {f.column}=true or {f.column}=false")
    if f.column not in FLAG_COLUMNS and isinstance(f.value, bool):
        raise InputError(f"{text}: {f.column} holds numbers; compare it with a number")


def column_ranges(handle: StoreHandle, run: str, query: ExplorerQuery, columns: list[str]) -> dict:
    """min/max of numeric columns over the whole run (bounds for filter sliders)."""
    with handle.read() as store:
        spec = _spec(
            store,
            run,
            query.estimator,
            query.config,
            query.compare,
            query.compare_config,
            query.credit,
            query.betas,
        )
        return queries.column_ranges(store, spec, columns)


def step_trends(
    handle: StoreHandle,
    run: str,
    estimator: str | None = None,
    config: tuple = (),
    *,
    prepare_missing: bool = True,
    quantiles: bool = True,
    credit: str = "final",
    betas: tuple = (),
) -> pd.DataFrame:
    """One row per step: rollouts, groups, reward, length, mean_entropy, kl (NULL without reference
    logprobs), zero_variance_share, truncated_share, repetition, score_<channel>...; with an estimator
    share_<class>... and excess_<class>... (of A_final, or with `credit` "channel" of the estimator's
    output), max_abs and (unless not `quantiles`) the quantiles q05, q25, q50, q75, q95 of the estimator's
    A over the step's tokens (a sort of every token: the slow part on big runs). betas: a tuned β in
    A_final, as `ExplorerQuery.betas`."""
    if prepare_missing:
        prepare(handle, run, estimator, config, credit=credit, betas=betas)
    with handle.read() as store:
        return step_trends_in(store, run, estimator, config, quantiles=quantiles, credit=credit, betas=betas)


def step_trends_in(
    store: Store,
    run: str,
    estimator: str | None = None,
    config: tuple = (),
    *,
    quantiles: bool = True,
    credit: str = "channel",
    betas: tuple = (),
) -> pd.DataFrame:
    """`step_trends` on an open store, summaries as they are (the monitors read it beside their other
    numbers on one connection: opening one costs 0.1-0.3 s on a 150 MB store)."""
    spec = _spec(store, run, estimator, config, None, (), credit, betas)
    return trend_queries.step_trends(store, spec, quantiles=quantiles)


def table_columns(handle: StoreHandle, run: str, query: ExplorerQuery) -> list[str]:
    """The columns `rollout_table` returns for this query (without computing anything), `preview` last."""
    with handle.read() as store:
        spec = _spec(
            store,
            run,
            query.estimator,
            query.config,
            query.compare,
            query.compare_config,
            query.credit,
            query.betas,
        )
        return queries.table_columns(store, spec) + ["preview"]
