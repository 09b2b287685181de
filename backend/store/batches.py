"""Arrow -> tensors: rollouts of a run as a padded `RolloutBatch` (the estimators' input)."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from backend.core import turns as agent_turns
from backend.core.batch_fields import (
    AGENT_COLUMNS,
    MC_EXTRAS,
    MODEL_SCORED,
    PER_TOKEN_FIELDS,
    model_score_needs,
)
from backend.core.errors import InputError
from backend.store.model_credit_extras import model_credit_extras
from backend.store.runs import Runs

if TYPE_CHECKING:
    import torch

    from backend.core.batch import RolloutBatch


def pad_list_array(
    array: pa.Array | pa.ChunkedArray,
    T: int,
    dtype: np.dtype,
    layout: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """A list<number> Arrow array -> (B, T) numpy array, zero padded; nulls become empty rows.

    layout: (lengths (B,), mask (B, T)) of the batch, when the caller has them: when the rows' lengths are
    those, the values are placed with one masked assignment (row-major order is the flat values' order)."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    B = len(array)
    out = np.zeros((B, T), dtype=dtype)
    if B == 0:
        return out
    lengths = array.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = array.flatten()
    values = (values.fill_null(0) if values.null_count else values).to_numpy(zero_copy_only=False)
    if layout is not None and layout[1].shape == (B, T) and np.array_equal(lengths, layout[0]):
        out[layout[1]] = values
        return out
    rows = np.repeat(np.arange(B), lengths)
    starts = np.cumsum(lengths) - lengths
    cols = np.arange(len(values)) - np.repeat(starts, lengths)
    keep = cols < T
    out[rows[keep], cols[keep]] = values[keep]
    return out


class Batches(Runs):
    """Reads that assemble estimator batches."""

    def scan_rollouts(self, run: str, fields: Collection[str] | None) -> tuple[pa.Table, pa.Table]:
        """The rows a whole-run batch of `fields` reads (`load_batch`), in one scan of each table: the
        rollouts' columns and the scores, as Arrow (what `bench scale` times as the read floor)."""
        run_id = self.run_id(run)
        wanted = None if fields is None else frozenset(fields)
        rollouts = _rollout_table(self.con, run_id, wanted, None, None, None, None)
        scores = self.con.sql(
            "SELECT rollout_id, channel, score FROM scores WHERE run_id = ?", params=[run_id]
        ).to_arrow_table()
        return rollouts, scores

    def load_batch(
        self,
        run: str,
        rollout_ids: list[int] | None = None,
        group_ids: list[int] | None = None,
        steps: list[int] | None = None,
        device: str | torch.device = "cpu",
        *,
        fields: Collection[str] | None = None,
        id_range: tuple[int, int] | None = None,
    ) -> RolloutBatch:
        """Rollouts of `run` (all, or the given rollout/group ids or steps) as a padded `RolloutBatch`,
        ordered by rollout id. Resampling results become extras `mc_values`/`mc_mask`; model-credit scores
        `<method>_scores`/`<method>_mask` (backend/store/model_credit_extras.py).

        fields: the optional inputs to load (`OPTIONAL_FIELDS` names, or extras names such as
            `mc_values`); None loads every one. Token ids, the mask, ids and scores always come.
        id_range: (first, last) rollout ids, inclusive: a cheap pre-filter for chunked reads (rows of
            a run are stored in rollout order, so DuckDB skips the row groups outside it).
        """
        # Imported here, not at the top: every command imports the store, and the ones that only read it
        # (`creditlens runs`, `rollouts` without an estimator) must not pay torch's 2-3 s import.
        import torch  # noqa: PLC0415 - heavy; only to build a batch

        from backend.core.batch import RolloutBatch  # noqa: PLC0415 - idem (imports torch)

        run_id = self.run_id(run)
        wanted = None if fields is None else frozenset(fields)
        table = _rollout_table(self.con, run_id, wanted, rollout_ids, group_ids, steps, id_range)
        if group_ids is not None:  # a group asked for by id that the run lacks is named, not an empty batch
            missing = sorted({int(g) for g in group_ids} - set(table.column("group_id").to_pylist()))
            if missing:
                raise InputError(
                    f"run {run!r} has no group {missing[0]} (group ids as `creditlens rollouts --run {run}` "
                    "shows them)"
                )
        rows = _batch_rows(table, id_range)
        cond = "run_id = ? AND rollout_id BETWEEN ? AND ?"  # the other tables: the batch's id span
        scores = _per_channel(
            self.con, f"SELECT rollout_id, channel, score FROM scores WHERE {cond}", run_id, rows, False
        )
        token_rewards = (
            _per_channel(
                self.con,
                f"SELECT rollout_id, channel, rewards FROM token_rewards WHERE {cond}",
                run_id,
                rows,
                True,
            )
            if _loads(wanted, "token_rewards")
            else {}
        )
        extras = _per_channel(
            self.con,
            f"SELECT rollout_id, name, vals FROM token_features WHERE {cond}",
            run_id,
            rows,
            True,
            only=wanted,
        )
        extras.update(_resample_extras(self.con, cond, run_id, rows, wanted))
        methods = [m for m in MODEL_SCORED if any(_loads(wanted, n) for n in model_score_needs(m))]
        if methods:  # OAR / GCPO scores, when they cover every rollout of the batch
            extras.update(model_credit_extras(self.con, run_id, [int(i) for i in rows.ids], rows.T, methods))
        extras.update(_logged_advantage(table))
        tokens, token_text = _token_strings(table, wanted)

        def tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
            return {name: torch.from_numpy(values) for name, values in arrays.items()}

        per_token = {name: _per_token(table, name, rows) for name in PER_TOKEN_FIELDS}
        loss_mask, turns, turn_rewards = _agent(table, rows)
        batch = RolloutBatch(
            response_mask=torch.from_numpy(rows.mask),
            token_ids=torch.from_numpy(
                pad_list_array(table.column("token_ids"), rows.T, np.int64, (rows.lengths, rows.mask))
            ),
            group_ids=torch.from_numpy(table.column("group_id").to_numpy().astype(np.int64)),
            rollout_ids=torch.from_numpy(rows.ids.astype(np.int64)),
            steps=torch.from_numpy(table.column("step").to_numpy().astype(np.int64)),
            scores=tensors(scores),
            token_rewards=tensors(token_rewards),
            tokens=tokens,
            token_text=token_text,
            extras=tensors(extras),
            loss_mask=None if loss_mask is None else torch.from_numpy(loss_mask),
            turns=turns,
            turn_rewards=turn_rewards,
            **{
                name: None if values is None else torch.from_numpy(values)
                for name, values in per_token.items()
            },
        )
        return batch.to(device)


def _loads(wanted: frozenset[str] | None, name: str) -> bool:
    """Whether the batch loads the optional input `name` (`wanted`: the names asked for; None: all)."""
    return wanted is None or name in wanted


def _rollout_table(
    con,
    run_id: int,
    wanted: frozenset[str] | None,
    rollout_ids: list[int] | None,
    group_ids: list[int] | None,
    steps: list[int] | None,
    id_range: tuple[int, int] | None,
) -> pa.Table:
    """The batch's rows of `rollouts`, ordered by rollout id: ids, step, token ids and the wanted
    per-token columns."""
    where, params = ["run_id = ?"], [run_id]
    if id_range is not None:
        where.append("rollout_id BETWEEN ? AND ?")
        params += [int(id_range[0]), int(id_range[1])]
    for column, ids in (("rollout_id", rollout_ids), ("group_id", group_ids), ("step", steps)):
        if ids is not None:
            where.append(f"list_contains(?, {column})")
            params.append([int(i) for i in ids])
    cond = " AND ".join(where)
    names = ["rollout_id", "group_id", "step", "token_ids", "loss_mask"]  # the mask always: what is trained
    names += [c for c in AGENT_COLUMNS if _loads(wanted, c)]
    names += [c for c in ("tokens", *PER_TOKEN_FIELDS, "logged_advantage") if _loads(wanted, c)]
    if _loads(wanted, "token_text") and "tokens" not in names:
        names.append("tokens")
    columns = ", ".join(f'"{c}"' for c in names)  # constant names
    return con.sql(
        f"SELECT {columns} FROM rollouts WHERE {cond} ORDER BY rollout_id",
        params=params,
    ).to_arrow_table()


@dataclass(frozen=True)
class _BatchRows:
    """Where each rollout of a batch sits.

    ids: (B,) rollout ids in row order; lengths: (B,) response lengths; mask: (B, T) bool, the response
    mask; T: the longest response; row_of: rollout id -> row; span: [first, last] rollout ids, the range
    the other tables are read over ([0, -1] for an empty batch)."""

    ids: np.ndarray
    lengths: np.ndarray
    mask: np.ndarray
    T: int
    row_of: dict[int, int]
    span: list[int]


def _batch_rows(table: pa.Table, id_range: tuple[int, int] | None) -> _BatchRows:
    ids = table.column("rollout_id").to_numpy()
    lengths = (
        table.column("token_ids").combine_chunks().value_lengths().to_numpy(zero_copy_only=False)
        if table.num_rows
        else np.zeros(0, dtype=np.int64)
    )
    T = int(lengths.max()) if len(lengths) else 0
    mask = np.arange(T)[None, :] < lengths[:, None]  # (B, T)
    row_of = {int(r): i for i, r in enumerate(ids)}
    if id_range is None and len(ids):
        id_range = (int(ids.min()), int(ids.max()))
    span = [int(id_range[0]), int(id_range[1])] if len(ids) else [0, -1]
    return _BatchRows(ids, lengths, mask, T, row_of, span)


def _per_token(table: pa.Table, column: str, rows: _BatchRows) -> np.ndarray | None:
    """A per-token column as (B, T) float32, or None when the batch lacks it (in any of its rollouts)."""
    if column not in table.column_names:
        return None
    col = table.column(column)
    if col.null_count == len(col) or len(col) == 0:
        return None
    if col.null_count:  # some rollouts lack the field: treat as missing for the batch
        return None
    return pad_list_array(col, rows.T, np.float32, (rows.lengths, rows.mask))


def _per_channel(
    con, sql: str, run_id: int, rows: _BatchRows, is_list: bool, only: Collection[str] | None = None
) -> dict[str, np.ndarray]:
    """`sql`'s (rollout_id, name, value) rows over the batch's span as one array per name, in name order:
    (B, T) float32 for per-token lists (`is_list`), else (B,) float32; `only`: the names to keep."""
    data = con.sql(sql, params=[run_id, *rows.span]).to_arrow_table()
    keep = np.isin(data.column(0).to_numpy(), rows.ids) if data.num_rows else np.zeros(0, dtype=bool)
    if only is not None and data.num_rows:
        keep &= np.isin(np.asarray(data.column(1).to_pylist(), dtype=object), list(only))
    data = data.filter(pa.array(keep))
    out: dict[str, np.ndarray] = {}
    if data.num_rows == 0:
        return out
    names = data.column(1).to_pylist()
    at = np.array([rows.row_of[int(r)] for r in data.column(0).to_pylist()], dtype=np.int64)
    for name in sorted(set(names)):
        sel = np.array([n == name for n in names])
        if is_list:
            dense = np.zeros((len(rows.ids), rows.T), dtype=np.float32)
            dense[at[sel]] = pad_list_array(data.column(2).filter(pa.array(sel)), rows.T, np.float32)
        else:
            # A rollout without a score on this channel is NaN, never 0: the outcome estimators
            # leave it out of the group statistics and give it Z = 0 (TRL's semantics).
            dense = np.full(len(rows.ids), np.nan, dtype=np.float32)
            dense[at[sel]] = data.column(2).filter(pa.array(sel)).to_numpy()
        out[name] = dense
    return out


def _resample_extras(
    con, cond: str, run_id: int, rows: _BatchRows, wanted: frozenset[str] | None
) -> dict[str, np.ndarray]:
    """Resampling results as extras `mc_values` (the mean reward of the samples from each position) and
    `mc_mask` (1 where there are some), both (B, T) float32; empty when none are wanted or stored."""
    mc = (
        con.execute(
            f"SELECT rollout_id, pos, avg(reward) FROM resample_samples WHERE {cond} "
            "GROUP BY rollout_id, pos",
            [run_id, *rows.span],
        ).fetchall()
        if any(_loads(wanted, n) for n in MC_EXTRAS)
        else []
    )
    mc = [row for row in mc if int(row[0]) in rows.row_of]
    if not mc:
        return {}
    mc_values = np.zeros((len(rows.ids), rows.T), dtype=np.float32)
    mc_mask = np.zeros((len(rows.ids), rows.T), dtype=np.float32)
    for rid, pos, value in mc:
        if 0 <= pos < rows.T:
            mc_values[rows.row_of[int(rid)], pos] = float(value)
            mc_mask[rows.row_of[int(rid)], pos] = 1.0
    return {MC_EXTRAS[0]: mc_values, MC_EXTRAS[1]: mc_mask}


def _agent(table: pa.Table, rows: _BatchRows) -> tuple[np.ndarray | None, list | None, list | None]:
    """The batch's loss mask (B, T) bool (None when no rollout has one: all trained), its turns (per rollout
    (role, start, end) spans; a rollout with a mask and no stored turns gets its mask's runs) and turn
    rewards, each None when no rollout of the batch has it."""
    mask_col = table.column("loss_mask")
    loss_mask = None
    if mask_col.null_count < len(mask_col):
        loss_mask = rows.mask.copy()  # a rollout without a mask trains every real token
        have = ~mask_col.is_null().to_numpy(zero_copy_only=False)
        dense = pad_list_array(mask_col.cast(pa.list_(pa.int8())), rows.T, np.int8) > 0
        loss_mask[have] = dense[have] & rows.mask[have]
    turns = None
    stored_turns = table.column("turns") if "turns" in table.column_names else None
    # a batch of plain rollouts (no turns, no mask: every single-turn run) has no spans to read
    if stored_turns is not None and (stored_turns.null_count < len(stored_turns) or loss_mask is not None):
        stored = stored_turns.to_pylist()
        masks = mask_col.to_pylist()
        spans = []
        for text, mask in zip(stored, masks, strict=True):
            listed = json.loads(text) if text else (agent_turns.spans_from_mask(mask) if mask else [])
            spans.append([(t["role"], int(t["start"]), int(t["end"])) for t in listed])
        turns = spans if any(spans) else None
    turn_rewards = None
    if "turn_rewards" in table.column_names and table.column("turn_rewards").null_count < table.num_rows:
        turn_rewards = [r or [] for r in table.column("turn_rewards").to_pylist()]
    return loss_mask, turns, turn_rewards


def _logged_advantage(table: pa.Table) -> dict[str, np.ndarray]:
    """The trainer's advantage as extra `logged_advantage` (B,) float32, NaN where absent; empty when
    no rollout has one."""
    if "logged_advantage" not in table.column_names:
        return {}
    logged = table.column("logged_advantage")
    if not (len(logged) and logged.null_count < len(logged)):
        return {}
    return {"logged_advantage": logged.to_numpy(zero_copy_only=False).astype(np.float32)}


def _token_strings(table: pa.Table, wanted: frozenset[str] | None) -> tuple[list | None, pa.Array | None]:
    """The batch's `tokens` (a list per rollout) and `token_text` (their flat values), each when wanted
    and every rollout has its tokens."""
    tokens_col = table.column("tokens") if "tokens" in table.column_names else None
    whole = tokens_col is not None and tokens_col.null_count == 0
    tokens = tokens_col.to_pylist() if whole and _loads(wanted, "tokens") else None
    token_text = tokens_col.combine_chunks().flatten() if whole and _loads(wanted, "token_text") else None
    return tokens, token_text
