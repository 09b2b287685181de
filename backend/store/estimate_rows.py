"""Estimator outputs on their way to the store's cache: flat rows of a batch (`EstimateRows`), and the
Parquet file a streamed run's rows are staged in until one transaction saves them all (`EstimateStage`)."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

ROWS_SCHEMA = pa.schema([("rollout_id", pa.int32()), ("advantages", pa.list_(pa.float32()))])
"""The cache's per-rollout columns (table estimates: rollout_id, advantages)."""


@dataclass(frozen=True)
class EstimateRows:
    """Estimator outputs of some rollouts, flat: `values` holds each rollout's (L,) advantages in the
    order of `rollout_ids` (`lengths` their L), so a chunk of a run is saved without a python object per
    rollout."""

    rollout_ids: np.ndarray  # (B,) int
    lengths: np.ndarray  # (B,) int
    values: np.ndarray  # (sum of lengths,) float32

    @classmethod
    def from_dict(cls, advantages: dict[int, np.ndarray]) -> EstimateRows:
        arrays = [np.asarray(a, dtype=np.float32).reshape(-1) for a in advantages.values()]
        return cls(
            np.fromiter(advantages, dtype=np.int64, count=len(advantages)),
            np.array([len(a) for a in arrays], dtype=np.int64),
            np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float32),
        )

    @property
    def tokens(self) -> int:
        return len(self.values)

    def as_dict(self) -> dict[int, np.ndarray]:
        """rollout id -> its (L,) advantages (views into `values`)."""
        ends = np.cumsum(self.lengths)
        parts = np.split(self.values, ends[:-1]) if len(ends) else []
        return {int(r): a for r, a in zip(self.rollout_ids, parts, strict=True)}

    def table(self) -> pa.Table:
        """rollout_id, advantages (list<float32>), in `ROWS_SCHEMA`."""
        offsets = np.zeros(len(self.rollout_ids) + 1, dtype=np.int32)  # a batch has far fewer than 2**31
        np.cumsum(self.lengths, out=offsets[1:])
        values = pa.array(np.asarray(self.values, dtype=np.float32))
        return pa.table(
            {
                "rollout_id": pa.array(np.asarray(self.rollout_ids).astype(np.int32)),
                "advantages": pa.ListArray.from_arrays(pa.array(offsets), values),
            },
            schema=ROWS_SCHEMA,
        )


class EstimateStage:
    """A streamed run's outputs, appended chunk by chunk to a Parquet file in a temporary directory (about
    4 bytes per token on disk, nothing kept in memory), then saved by `Results.save_estimate` in one
    transaction: the cache gets the whole run or nothing, with one commit. Use as a context manager (the
    directory is removed on exit)."""

    def __init__(self) -> None:
        self._dir = tempfile.TemporaryDirectory(prefix="creditlens-stage-")
        self.path = Path(self._dir.name) / "estimates.parquet"
        # lz4 without dictionaries: the fastest to write here for both constant-per-rollout and varying
        # advantages (measured on 2M-token chunks); the file lives for one estimate
        self._writer: pq.ParquetWriter | None = pq.ParquetWriter(
            self.path, ROWS_SCHEMA, compression="lz4", use_dictionary=False
        )
        self.rollouts = 0
        self.tokens = 0

    def add(self, rows: EstimateRows) -> None:
        if self._writer is None:
            raise ValueError("this stage is closed")
        self._writer.write_table(rows.table())
        self.rollouts += len(rows.rollout_ids)
        self.tokens += rows.tokens

    def close(self) -> None:
        """Finish the file (it stays until the stage is cleaned up)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def __enter__(self) -> EstimateStage:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
        self._dir.cleanup()
