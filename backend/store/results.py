"""Results kept per run: the estimator cache (outputs keyed on estimator, config hash and channel) and
resampling results (suffixes and their rewards)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pandas as pd
import pyarrow as pa

from backend.store.estimate_rows import EstimateRows, EstimateStage
from backend.store.runs import Runs


class Results(Runs):
    """Estimator outputs and resampling results of runs."""

    # --- estimator cache -------------------------------------------------------------------------
    # Outputs keyed on (estimator, config hash, channel). Anything that changes a run's inputs
    # (appended rollouts, rescored tokens, new resampling results) drops the run's cached outputs.
    def drop_credit_summaries(self, run: str) -> None:
        """The run's credit-by-class summaries (after its token classes change)."""
        self.con.execute("DELETE FROM credit_summary WHERE run_id = ?", [self.run_id(run)])

    def cached_estimate(
        self,
        run: str,
        estimator: str,
        config_hash: str,
        channel: str,
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
        return EstimateRows(
            table.column("rollout_id").to_numpy(),
            lists.value_lengths().fill_null(0).to_numpy(zero_copy_only=False),
            lists.flatten().to_numpy(zero_copy_only=False).astype(np.float32),
        ).as_dict()

    def cached_rollouts(self, run: str, estimator: str, config_hash: str, channel: str) -> int:
        """How many rollouts of `run` have a cached output under this key."""
        return int(
            self._first(
                "SELECT count(*) FROM estimates WHERE run_id = ? AND estimator = ? AND config_hash = ? "
                "AND channel = ?",
                [self.run_id(run), estimator, config_hash, channel],
            )[0]
        )

    def cached_rollout_ids(self, run: str, estimator: str, config_hash: str, channel: str) -> set[int]:
        """The rollouts of `run` with a cached output under this key."""
        rows = self.con.execute(
            "SELECT rollout_id FROM estimates WHERE run_id = ? AND estimator = ? AND config_hash = ? "
            "AND channel = ?",
            [self.run_id(run), estimator, config_hash, channel],
        ).fetchall()
        return {int(r) for (r,) in rows}

    def save_estimate(
        self,
        run: str,
        estimator: str,
        config_hash: str,
        config: dict,
        channel: str,
        advantages: dict[int, np.ndarray] | EstimateRows | EstimateStage,
        scope: str | None = None,
    ) -> None:
        """Cache `advantages` of `run` under the key (rollout id -> (L,) float32, `EstimateRows`, or an
        `EstimateStage` whose file holds a streamed run's rows); the rollouts' earlier rows under the key
        are replaced, in one transaction. `scope`: the estimator's scope (None: unknown, read as run)."""
        run_id = self.run_id(run)
        config_json = json.dumps(config, sort_keys=True, default=str)
        key = [run_id, estimator, config_hash, config_json, channel, scope]
        if isinstance(advantages, EstimateStage):
            advantages.close()
            self._replace_estimates(key, "read_parquet(?)", [str(advantages.path)])  # the path: a parameter
            return
        rows = advantages if isinstance(advantages, EstimateRows) else EstimateRows.from_dict(advantages)
        view = f"_estimate_rows_{threading.get_ident()}"
        self.con.register(view, rows.table())
        try:
            self._replace_estimates(key, view, [])
        finally:
            self.con.unregister(view)

    def _replace_estimates(self, key: list, view: str, params: list) -> None:
        """Delete the cached rows under `key` (run id, estimator, config hash, config JSON, channel, scope) of
        the rollouts in `view` (rollout_id, advantages: a view registered here, or `read_parquet(?)` with
        the file in `params`), and insert those."""
        run_id, estimator, config_hash, config, channel, scope = key
        with self.transaction() as con:
            # Only these rollouts: a step-scoped estimate is saved one step at a time.
            con.execute(
                "DELETE FROM estimates WHERE run_id = ? AND estimator = ? AND config_hash = ? "
                f"AND channel = ? AND rollout_id IN (SELECT rollout_id FROM {view})",
                [run_id, estimator, config_hash, channel, *params],
            )
            con.execute(
                "INSERT INTO estimates "
                "(run_id, estimator, config_hash, config, channel, rollout_id, advantages, scope) "
                "SELECT CAST(? AS INTEGER), CAST(? AS VARCHAR), CAST(? AS VARCHAR), CAST(? AS JSON), "
                f"CAST(? AS VARCHAR), rollout_id, advantages, CAST(? AS VARCHAR) FROM {view}",
                [run_id, estimator, config_hash, config, channel, scope, *params],
            )

    # --- resampling results --------------------------------------------------------------------
    def save_resample(
        self, run: str, rollout_id: int, samples: pa.Table | pd.DataFrame, job: str | None = None
    ) -> int:
        """Append resampled suffixes: columns pos, sample_idx, seed, suffix_ids, suffix_text, reward,
        engine, model; `job` marks the rows (the teacher job writes 'teacher'). Atomic; returns the
        number of rows stored."""
        return self.save_resamples(run, {int(rollout_id): samples}, job=job)

    def save_resamples(
        self, run: str, tables: dict[int, pa.Table | pd.DataFrame], job: str | None = None
    ) -> int:
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
        suffix_text, reward, engine, model, on_policy (whether the model sampled the rollout's step; NULL:
        unknown); ordered by rollout, position and sample."""
        return self.con.sql(
            "SELECT rollout_id, pos, sample_idx, seed, suffix_ids, suffix_text, reward, engine, model, "
            "on_policy "
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

    def step_channel_means(self, run: str, thresholds: dict[str, float] | None = None) -> pd.DataFrame:
        """Per step and channel: mean score, the share of scored rollouts whose score is below the channel's
        violation threshold (`thresholds`, default 0: a negative score) and the number scored, for the
        dual-ascent replay (backend/views/tune.py). A rollout without a score on a channel is not counted."""
        names = list(thresholds or {})
        return self.con.execute(
            "WITH t AS (SELECT unnest(?::VARCHAR[]) AS channel, unnest(?::DOUBLE[]) AS threshold) "
            "SELECT o.step, s.channel, avg(s.score) AS mean, avg(CASE WHEN isnan(s.score) THEN NULL "
            "WHEN s.score < coalesce(t.threshold, 0) THEN 1.0 ELSE 0.0 END) AS violation_rate, "
            "count(s.score) FILTER (WHERE NOT isnan(s.score)) AS n FROM scores s JOIN rollouts o "
            "ON o.run_id = s.run_id AND o.rollout_id = s.rollout_id LEFT JOIN t ON t.channel = s.channel "
            "WHERE s.run_id = ? GROUP BY o.step, s.channel ORDER BY o.step, s.channel",
            [names, [float(thresholds[c]) for c in names], self.run_id(run)],
        ).df()

    def channel_score_ranges(self, run: str) -> pd.DataFrame:
        """Per channel: the lowest and highest score and whether every score is 0 or 1 (`binary`), over the
        run's scored rollouts: what a channel's default violation threshold is read from."""
        return self.con.execute(
            "SELECT channel, min(score) AS low, max(score) AS high, "
            "bool_and(score = 0 OR score = 1) AS binary, count(*) AS n FROM scores "
            "WHERE run_id = ? AND score IS NOT NULL AND NOT isnan(score) GROUP BY channel ORDER BY channel",
            [self.run_id(run)],
        ).df()
