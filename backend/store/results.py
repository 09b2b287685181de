"""Results kept per run: the estimator cache (outputs keyed on estimator, config hash and channel) and
resampling results (suffixes and their rewards)."""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pyarrow as pa

from backend.store.runs import Runs


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
        return cls(np.fromiter(advantages, dtype=np.int64, count=len(advantages)),
                   np.array([len(a) for a in arrays], dtype=np.int64),
                   np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.float32))

    @classmethod
    def concat(cls, parts: list[EstimateRows]) -> EstimateRows:
        if not parts:
            return cls(np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.float32))
        return cls(*(np.concatenate([getattr(p, name) for p in parts])
                     for name in ("rollout_ids", "lengths", "values")))

    @property
    def tokens(self) -> int:
        return len(self.values)


class Results(Runs):
    """Estimator outputs and resampling results of runs."""

    # --- estimator cache -------------------------------------------------------------------------
    # Outputs keyed on (estimator, config hash, channel). Anything that changes a run's inputs
    # (appended rollouts, rescored tokens, new resampling results) drops the run's cached outputs.
    def drop_credit_summaries(self, run: str) -> None:
        """The run's credit-by-class summaries (after its token classes change)."""
        self.con.execute("DELETE FROM credit_summary WHERE run_id = ?", [self.run_id(run)])


    def cached_estimate(
        self, run: str, estimator: str, config_hash: str, channel: str,
        id_range: tuple[int, int] | None = None,
    ) -> dict[int, np.ndarray]:
        """Cached advantages per rollout id (of rollouts `id_range`, inclusive, when given)."""
        first, last = id_range if id_range is not None else (-(2**31), 2**31 - 1)
        table = self.con.sql(
            "SELECT rollout_id, advantages FROM estimates "
            "WHERE run_id = ? AND estimator = ? AND config_hash = ? AND channel = ? "
            "AND rollout_id BETWEEN ? AND ?",
            params=[self.run_id(run), estimator, config_hash, channel, int(first), int(last)],
        ).to_arrow_table()
        if table.num_rows == 0:
            return {}
        lists = table.column("advantages").combine_chunks()
        values = lists.flatten().to_numpy(zero_copy_only=False).astype(np.float32)  # a writable copy
        ends = np.cumsum(lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False))
        parts = np.split(values, ends[:-1])
        return {int(r): a for r, a in zip(table.column("rollout_id").to_numpy(), parts, strict=True)}

    def cached_rollouts(self, run: str, estimator: str, config_hash: str, channel: str) -> int:
        """How many rollouts of `run` have a cached output under this key."""
        return int(self._first(
            "SELECT count(*) FROM estimates WHERE run_id = ? AND estimator = ? AND config_hash = ? "
            "AND channel = ?", [self.run_id(run), estimator, config_hash, channel])[0])

    def save_estimate(
        self,
        run: str,
        estimator: str,
        config_hash: str,
        config: dict,
        channel: str,
        advantages: dict[int, np.ndarray] | EstimateRows,
    ) -> None:
        """Cache `advantages` (rollout id -> (L,) float32, or `EstimateRows`) of `run` under the key; the
        rollouts' earlier rows under it are replaced, in one transaction."""
        rows = advantages if isinstance(advantages, EstimateRows) else EstimateRows.from_dict(advantages)
        run_id = self.run_id(run)
        n = len(rows.rollout_ids)
        offsets = np.zeros(n + 1, dtype=np.int32)  # one save holds far fewer than 2**31 tokens
        np.cumsum(rows.lengths, out=offsets[1:])
        data = pa.table(
            {
                "run_id": pa.array(np.full(n, run_id, dtype=np.int32)),
                "estimator": pa.array([estimator], pa.string()).take(np.zeros(n, dtype=np.int32)),
                "config_hash": pa.array([config_hash], pa.string()).take(np.zeros(n, dtype=np.int32)),
                "config": pa.array([json.dumps(config, sort_keys=True, default=str)], pa.string())
                .take(np.zeros(n, dtype=np.int32)),
                "channel": pa.array([channel], pa.string()).take(np.zeros(n, dtype=np.int32)),
                "rollout_id": pa.array(rows.rollout_ids.astype(np.int32)),
                "advantages": pa.ListArray.from_arrays(
                    pa.array(offsets), pa.array(rows.values.astype(np.float32, copy=False))
                ),
            }
        )
        ids = f"_estimate_ids_{threading.get_ident()}"
        with self.transaction() as con:
            # Only these rollouts: a step-scoped estimate is saved one step at a time.
            con.register(ids, data.select(["rollout_id"]))
            try:
                con.execute(
                    "DELETE FROM estimates WHERE run_id = ? AND estimator = ? AND config_hash = ? "
                    f"AND channel = ? AND rollout_id IN (SELECT rollout_id FROM {ids})",
                    [run_id, estimator, config_hash, channel],
                )
            finally:
                con.unregister(ids)
            self.insert_arrow("estimates", data)

    # --- resampling results --------------------------------------------------------------------
    def save_resample(self, run: str, rollout_id: int, samples: pa.Table | pd.DataFrame,
                      job: str | None = None) -> int:
        """Append resampled suffixes: columns pos, sample_idx, seed, suffix_ids, suffix_text, reward,
        engine, model; `job` marks the rows (the teacher job writes 'teacher'). Atomic; returns the
        number of rows stored."""
        return self.save_resamples(run, {int(rollout_id): samples}, job=job)

    def save_resamples(self, run: str, tables: dict[int, pa.Table | pd.DataFrame],
                       job: str | None = None) -> int:
        """`save_resample` for several rollouts: one transaction per rollout, so a failure keeps every
        rollout before it whole and leaves no part of the failing one. Returns the rows stored."""
        run_id = self.run_id(run)
        total = 0
        for rollout_id, samples in tables.items():
            if isinstance(samples, pd.DataFrame):
                samples = pa.Table.from_pandas(samples, preserve_index=False)
            n = samples.num_rows
            samples = samples.append_column("run_id", pa.array([run_id] * n, pa.int32()))
            samples = samples.append_column("rollout_id", pa.array([int(rollout_id)] * n, pa.int32()))
            if job is not None:
                samples = samples.append_column("job", pa.array([job] * n, pa.string()))
            with self.transaction():
                self.insert_arrow("resample_samples", samples)
                self._drop_cached_estimates(run_id)  # suffix_mc and value_source=mc read these
            total += n
        return total

    def import_job_samples(self, run: str, samples: pa.Table, job: str) -> int:
        """Add suffixes of several rollouts (a `job_samples` table) in one transaction; returns rows."""
        run_id = self.run_id(run)
        n = samples.num_rows
        samples = samples.append_column("run_id", pa.array([run_id] * n, pa.int32()))
        samples = samples.append_column("job", pa.array([job] * n, pa.string()))
        with self.transaction():
            self.insert_arrow("resample_samples", samples)
            self._drop_cached_estimates(run_id)
        return n

    def job_rollouts(self, run: str, job: str) -> set[int]:
        """Rollout ids that have suffixes stored by `job` (each rollout is stored whole, or not at all)."""
        rows = self.con.execute(
            "SELECT DISTINCT rollout_id FROM resample_samples WHERE run_id = ? AND job = ?",
            [self.run_id(run), job],
        ).fetchall()
        return {int(r[0]) for r in rows}

    def job_samples(self, run: str, job: str) -> pa.Table:
        """Every suffix `job` stored for `run`: rollout_id, pos, sample_idx, seed, suffix_ids,
        suffix_text, reward, engine, model; ordered by rollout, position and sample."""
        return self.con.sql(
            "SELECT rollout_id, pos, sample_idx, seed, suffix_ids, suffix_text, reward, engine, model "
            "FROM resample_samples WHERE run_id = ? AND job = ? ORDER BY rollout_id, pos, sample_idx",
            params=[self.run_id(run), job],
        ).to_arrow_table()

    def resample_samples(self, run: str, rollout_id: int) -> pd.DataFrame:
        return self.con.execute(
            "SELECT pos, sample_idx, seed, suffix_ids, suffix_text, reward, engine, model, created "
            "FROM resample_samples WHERE run_id = ? AND rollout_id = ? ORDER BY pos, sample_idx",
            [self.run_id(run), int(rollout_id)],
        ).df()

    def resample_values(self, run: str, rollout_id: int | None = None) -> pd.DataFrame:
        """V̂(s_t) per resampled position: rollout_id, pos, value, stderr, n."""
        params: list = [self.run_id(run)]
        cond = ""
        if rollout_id is not None:
            cond = " AND rollout_id = ?"
            params.append(int(rollout_id))
        return self.con.execute(
            "SELECT rollout_id, pos, avg(reward) AS value, "
            "coalesce(stddev_samp(reward) / sqrt(count(*)), 0) AS stderr, count(*) AS n "
            f"FROM resample_samples WHERE run_id = ?{cond} GROUP BY rollout_id, pos ORDER BY rollout_id, pos",
            params,
        ).df()

    def step_channel_means(self, run: str) -> pd.DataFrame:
        """Per step and channel: mean score and the share of rollouts with a negative score (violation
        rate), for the dual-ascent replay."""
        return self.con.execute(
            "SELECT o.step, s.channel, avg(s.score) AS mean, avg(CASE WHEN s.score < 0 THEN 1 ELSE 0 END) "
            "AS violation_rate, count(*) AS n FROM scores s JOIN rollouts o "
            "ON o.run_id = s.run_id AND o.rollout_id = s.rollout_id WHERE s.run_id = ? "
            "GROUP BY o.step, s.channel ORDER BY o.step, s.channel",
            [self.run_id(run)],
        ).df()

