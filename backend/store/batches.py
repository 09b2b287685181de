"""Arrow -> tensors: rollouts of a run as a padded `RolloutBatch` (the estimators' input)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa

from backend.batch_fields import MC_EXTRAS, MODEL_SCORED, PER_TOKEN_FIELDS, model_score_needs
from backend.store.model_credit_extras import model_credit_extras
from backend.store.runs import Runs

if TYPE_CHECKING:
    import torch

    from backend.batch import RolloutBatch


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

        from backend.batch import RolloutBatch  # noqa: PLC0415 - idem (imports torch)

        run_id = self.run_id(run)
        wanted = None if fields is None else frozenset(fields)

        def loads(name: str) -> bool:
            return wanted is None or name in wanted

        where, params = ["run_id = ?"], [run_id]
        if id_range is not None:
            where.append("rollout_id BETWEEN ? AND ?")
            params += [int(id_range[0]), int(id_range[1])]
        for column, ids in (("rollout_id", rollout_ids), ("group_id", group_ids), ("step", steps)):
            if ids is not None:
                where.append(f"list_contains(?, {column})")
                params.append([int(i) for i in ids])
        cond = " AND ".join(where)
        names = ["rollout_id", "group_id", "step", "token_ids"]
        names += [c for c in ("tokens", *PER_TOKEN_FIELDS, "logged_advantage") if loads(c)]
        if loads("token_text") and "tokens" not in names:
            names.append("tokens")
        columns = ", ".join(f'"{c}"' for c in names)  # constant names
        table = self.con.sql(
            f"SELECT {columns} FROM rollouts WHERE {cond} ORDER BY rollout_id",
            params=params,
        ).to_arrow_table()
        ids = table.column("rollout_id").to_numpy()
        lengths = (
            table.column("token_ids").combine_chunks().value_lengths().to_numpy(zero_copy_only=False)
            if table.num_rows
            else np.zeros(0, dtype=np.int64)
        )
        T = int(lengths.max()) if len(lengths) else 0
        mask = np.arange(T)[None, :] < lengths[:, None]

        def per_token(column: str) -> torch.Tensor | None:
            if column not in table.column_names:
                return None
            col = table.column(column)
            if col.null_count == len(col) or len(col) == 0:
                return None
            if col.null_count:  # some rollouts lack the field: treat as missing for the batch
                return None
            return torch.from_numpy(pad_list_array(col, T, np.float32, (lengths, mask)))

        row_of = {int(r): i for i, r in enumerate(ids)}
        if id_range is None and len(ids):
            id_range = (int(ids.min()), int(ids.max()))
        span = [int(id_range[0]), int(id_range[1])] if len(ids) else [0, -1]

        def channel_arrays(
            sql: str, is_list: bool, only: Collection[str] | None = None
        ) -> dict[str, torch.Tensor]:
            data = self.con.sql(sql, params=[run_id, *span]).to_arrow_table()
            keep = np.isin(data.column(0).to_numpy(), ids) if data.num_rows else np.zeros(0, dtype=bool)
            if only is not None and data.num_rows:
                keep &= np.isin(np.asarray(data.column(1).to_pylist(), dtype=object), list(only))
            data = data.filter(pa.array(keep))
            out: dict[str, torch.Tensor] = {}
            if data.num_rows == 0:
                return out
            names = data.column(1).to_pylist()
            rows = np.array([row_of[int(r)] for r in data.column(0).to_pylist()], dtype=np.int64)
            for name in sorted(set(names)):
                sel = np.array([n == name for n in names])
                if is_list:
                    dense = np.zeros((len(ids), T), dtype=np.float32)
                    dense[rows[sel]] = pad_list_array(data.column(2).filter(pa.array(sel)), T, np.float32)
                else:
                    # A rollout without a score on this channel is NaN, never 0: the outcome estimators
                    # leave it out of the group statistics and give it Z = 0 (TRL's semantics).
                    dense = np.full(len(ids), np.nan, dtype=np.float32)
                    dense[rows[sel]] = data.column(2).filter(pa.array(sel)).to_numpy()
                out[name] = torch.from_numpy(dense)
            return out

        cond = "run_id = ? AND rollout_id BETWEEN ? AND ?"  # the other tables: the batch's id span
        scores = channel_arrays(f"SELECT rollout_id, channel, score FROM scores WHERE {cond}", False)
        token_rewards = (
            channel_arrays(f"SELECT rollout_id, channel, rewards FROM token_rewards WHERE {cond}", True)
            if loads("token_rewards")
            else {}
        )
        extras = channel_arrays(
            f"SELECT rollout_id, name, vals FROM token_features WHERE {cond}",
            True,
            only=wanted,
        )
        mc = (
            self.con.execute(
                f"SELECT rollout_id, pos, avg(reward) FROM resample_samples WHERE {cond} "
                "GROUP BY rollout_id, pos",
                [run_id, *span],
            ).fetchall()
            if any(loads(n) for n in MC_EXTRAS)
            else []
        )
        mc = [row for row in mc if int(row[0]) in row_of]
        if mc:
            mc_values = torch.zeros((len(ids), T))
            mc_mask = torch.zeros((len(ids), T))
            for rid, pos, value in mc:
                if 0 <= pos < T:
                    mc_values[row_of[int(rid)], pos] = float(value)
                    mc_mask[row_of[int(rid)], pos] = 1.0
            extras[MC_EXTRAS[0]], extras[MC_EXTRAS[1]] = mc_values, mc_mask
        methods = [m for m in MODEL_SCORED if any(loads(n) for n in model_score_needs(m))]
        if methods:  # OAR / GCPO scores, when they cover every rollout of the batch
            scored = model_credit_extras(self.con, run_id, [int(i) for i in ids], T, methods)
            extras.update({name: torch.from_numpy(values) for name, values in scored.items()})

        if "logged_advantage" in table.column_names:
            logged = table.column("logged_advantage")
            if len(logged) and logged.null_count < len(logged):  # the trainer's advantage, NaN where absent
                extras["logged_advantage"] = torch.from_numpy(
                    logged.to_numpy(zero_copy_only=False).astype(np.float32)
                )
        tokens_col = table.column("tokens") if "tokens" in table.column_names else None
        whole = tokens_col is not None and tokens_col.null_count == 0
        tokens = tokens_col.to_pylist() if whole and loads("tokens") else None
        token_text = tokens_col.combine_chunks().flatten() if whole and loads("token_text") else None
        batch = RolloutBatch(
            response_mask=torch.from_numpy(mask),
            token_ids=torch.from_numpy(
                pad_list_array(table.column("token_ids"), T, np.int64, (lengths, mask))
            ),
            group_ids=torch.from_numpy(table.column("group_id").to_numpy().astype(np.int64)),
            rollout_ids=torch.from_numpy(ids.astype(np.int64)),
            steps=torch.from_numpy(table.column("step").to_numpy().astype(np.int64)),
            scores=scores,
            token_rewards=token_rewards,
            tokens=tokens,
            token_text=token_text,
            extras=extras,
            **{name: per_token(name) for name in PER_TOKEN_FIELDS},
        )
        return batch.to(device)
