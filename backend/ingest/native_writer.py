"""Writing native Parquet step files: the format `backend.ingest` reads (docs/importing.md), one file per
training step, for recorders that run inside a trainer (`creditlens.integrations.trl`).

A step file is written whole to a hidden temporary name in the same folder and renamed into place
(`os.replace`, atomic on POSIX), so `creditlens import --follow DIR` never sees half a file and a killed
trainer leaves at most a `.tmp` file that no reader globs.

Columns (the native record fields): prompt, response, step, group (int), prompt_ids, token_ids, tokens
(when given), rewards (a struct of float64, one field per channel; null = no score on that channel),
logprobs / ref_logprobs / entropies (float32 lists, when given), extras (a struct of float32 lists),
logged_advantage (float64), meta (JSON text). Rows with no score on any channel are left out: the native
format requires a score (a trainer gives such rows advantage 0 and leaves them out of its statistics, so
the other rows' credit is unchanged); `StepRecords.table` reports how many.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_ids(rows: list[np.ndarray], name: str, where: str) -> None:
    for i, ids in enumerate(rows):
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise ValueError(f"{where}: {name}[{i}] must be a 1-D integer array, got {ids.dtype} {ids.shape}")
        if len(ids) and (ids.min() < -(2**31) or ids.max() >= 2**31):
            raise ValueError(f"{where}: {name}[{i}] has ids that do not fit 32 bits")


def _list_array(rows: list[np.ndarray], value_type: pa.DataType) -> pa.ListArray:
    """One list per row from flat values and offsets (no python list per token)."""
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    offsets = np.zeros(len(rows) + 1, dtype=np.int32)
    np.cumsum(lengths, out=offsets[1:])
    flat = np.concatenate(rows) if rows else np.zeros(0)
    return pa.ListArray.from_arrays(pa.array(offsets), pa.array(flat).cast(value_type))


@dataclass
class StepRecords:
    """One step's N rollouts, column-wise. Per-token arrays are the response tokens only, padding removed.

    prompt_ids, token_ids: N arrays of ints; rewards: channel -> (N,) float64, NaN = no score on it;
    groups: (N,) int, the group of each row within the step; per_token: logprobs / ref_logprobs /
    entropies -> N float arrays (each as long as its row's token_ids); extras: name -> N float arrays;
    logged_advantage: (N,) float64 or None; meta: one JSON object per row; loss_mask: N 0/1 arrays (1:
    trained) or None; turns: per row its [{role, start, end}] token spans (backend/core/turns.py) or None.
    """

    step: int
    prompts: list[str]
    responses: list[str]
    prompt_ids: list[np.ndarray]
    token_ids: list[np.ndarray]
    rewards: dict[str, np.ndarray]
    groups: np.ndarray
    tokens: list[list[str]] | None = None
    per_token: dict[str, list[np.ndarray]] = field(default_factory=dict)
    extras: dict[str, list[np.ndarray]] = field(default_factory=dict)
    logged_advantage: np.ndarray | None = None
    meta: list[dict] | None = None
    loss_mask: list[np.ndarray] | None = None
    turns: list[list[dict]] | None = None

    def table(self, where: str = "step records") -> tuple[pa.Table, int]:
        """The step as a native Arrow table and the number of rows left out for having no score.
        Raises ValueError naming the column and row when the columns disagree."""
        n = self._check_columns(where)
        self._check_per_token(where, n)
        scores = np.stack([np.asarray(v, np.float64) for v in self.rewards.values()])  # (C, N)
        keep = ~np.isnan(scores).all(axis=0)  # (N,)
        if np.isinf(scores[:, keep]).any():
            raise ValueError(f"{where}: a reward is infinite")
        rows = np.flatnonzero(keep)
        return self._arrow_table(scores, rows), int(n - len(rows))

    def _check_columns(self, where: str) -> int:
        """The step and the per-row columns checked (one row each per token_ids row); returns the rows."""
        n = len(self.token_ids)
        if not isinstance(self.step, int) or not 0 <= self.step < 2**31:
            raise ValueError(f"{where}: step must be a non-negative integer, got {self.step!r}")
        if not self.rewards:
            raise ValueError(f"{where}: no reward channels")
        columns = {
            "prompts": self.prompts,
            "responses": self.responses,
            "prompt_ids": self.prompt_ids,
            "groups": self.groups,
            **{f"rewards.{c}": v for c, v in self.rewards.items()},
        }
        if self.tokens is not None:
            columns["tokens"] = self.tokens
        if self.logged_advantage is not None:
            columns["logged_advantage"] = self.logged_advantage
        if self.meta is not None:
            columns["meta"] = self.meta
        if self.turns is not None:
            columns["turns"] = self.turns
        for name, values in columns.items():
            if len(values) != n:
                raise ValueError(f"{where}: {name} has {len(values)} rows, token_ids has {n}")
        return n

    def _check_per_token(self, where: str, n: int) -> None:
        """The ids fit 32 bits, and every per-token list has one finite entry per response token."""
        _check_ids(self.token_ids, "token_ids", where)
        _check_ids(self.prompt_ids, "prompt_ids", where)
        lengths = np.fromiter((len(t) for t in self.token_ids), dtype=np.int64, count=n)
        per_token = {**self.per_token, **{f"extras.{k}": v for k, v in self.extras.items()}}
        if self.loss_mask is not None:
            per_token["loss_mask"] = self.loss_mask
        if self.tokens is not None:
            per_token["tokens"] = self.tokens
        for name, rows in per_token.items():
            if len(rows) != n:
                raise ValueError(f"{where}: {name} has {len(rows)} rows, token_ids has {n}")
            for i, row in enumerate(rows):
                if len(row) != lengths[i]:
                    raise ValueError(
                        f"{where}: {name}[{i}] has {len(row)} entries, token_ids[{i}] has "
                        f"{lengths[i]}; per-token lists need one entry per response token"
                    )
                if name != "tokens" and not np.all(np.abs(np.asarray(row, np.float64)) <= FLOAT32_MAX):
                    raise ValueError(f"{where}: {name}[{i}] has a NaN or infinite value")

    def _arrow_table(self, scores: np.ndarray, rows: np.ndarray) -> pa.Table:
        """The native table of the checked columns' `rows` (scores: (C, N) float64, NaN = no score)."""

        def pick(values):
            return [values[i] for i in rows]

        table = {
            "prompt": pa.array(pick(self.prompts), pa.string()),
            "response": pa.array(pick(self.responses), pa.string()),
            "step": pa.array(np.full(len(rows), self.step, np.int64)),
            "group": pa.array(np.asarray(self.groups, np.int64)[rows]),
            "prompt_ids": _list_array(pick(self.prompt_ids), pa.int32()),
            "token_ids": _list_array(pick(self.token_ids), pa.int32()),
            "rewards": pa.StructArray.from_arrays(
                [pa.array(s[rows], pa.float64(), mask=np.isnan(s[rows])) for s in scores],
                names=list(self.rewards),
            ),
        }
        if self.tokens is not None:
            table["tokens"] = pa.array(pick(self.tokens), pa.list_(pa.string()))
        for name, values in self.per_token.items():
            table[name] = _list_array(pick(values), pa.float32())
        if self.extras:
            table["extras"] = pa.StructArray.from_arrays(
                [_list_array(pick(v), pa.float32()) for v in self.extras.values()], names=list(self.extras)
            )
        if self.loss_mask is not None:
            table["loss_mask"] = _list_array(pick(self.loss_mask), pa.int8())
        if self.turns is not None:
            span = pa.struct([("role", pa.string()), ("start", pa.int64()), ("end", pa.int64())])
            table["turns"] = pa.array(pick(self.turns), pa.list_(span))
        if self.logged_advantage is not None:
            table["logged_advantage"] = pa.array(np.asarray(self.logged_advantage, np.float64)[rows])
        if self.meta is not None:
            texts = [json.dumps(m, ensure_ascii=False, default=str) for m in pick(self.meta)]
            table["meta"] = pa.array(texts, pa.string())
        return pa.table(table)


def write_atomic(table: pa.Table, path: Path) -> None:
    """Write `table` to `path` as Parquet: a hidden `.tmp` file beside it, then `os.replace`."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        pq.write_table(table, tmp)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
