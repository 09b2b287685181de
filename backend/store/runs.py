"""Runs and staged imports: create, publish, list, delete runs; what an import needs to know; rollouts as
rows (index, one rollout, per-token updates)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid

import pandas as pd
import pyarrow as pa

from backend.core import turns as agent_turns
from backend.core.batch_fields import ALL_CHANNELS, PER_TOKEN_FIELDS, default_main_channel
from backend.core.errors import InputError, StoreError
from backend.store.connection import ESTIMATE_TABLES, IMPORTED_TABLES, RUN_TABLES, Connection

MAIN_SCORE_SQL = "CASE WHEN ? THEN sum(score) ELSE max(score) FILTER (WHERE channel = ?) END"
"""A rollout's score on the run's main channel, over its rows of `scores` (`all`: their sum); parameters:
`Runs.main_score_params`."""
GROWTH_STALE_SQL = (
    "SELECT rollout_id FROM rollouts WHERE run_id = $run AND (step IN (SELECT step FROM rollouts "
    "WHERE run_id = $run AND rollout_id >= $first) OR group_id IN (SELECT group_id FROM rollouts "
    "WHERE run_id = $run AND rollout_id >= $first))"
)
"""The rollouts of run `$run` in a step or group that rollouts `$first`.. joined (an append)."""
LOCAL_OUTPUTS_SQL = (
    "SELECT estimator, config_hash FROM estimates WHERE run_id = $run GROUP BY ALL "
    "HAVING bool_and(coalesce(scope IN ('step', 'group'), false))"
)
"""The (estimator, config hash) pairs of run `$run` whose cached outputs each read no more than a step."""
RUN_FIELDS = (
    "name",
    "source",
    "model",
    "verifier",
    "created",
    "rollouts",
    "groups",
    "steps",
    "tokens",
    "channels",
    "main_channel",
    "metrics",
    "last_step",
    "updated",
    "imports",
)
"""The fields of each run that `list_runs` gives, in order: `creditlens runs --json`, the columns of
`creditlens.open().runs()`."""


class Runs(Connection):
    """Run rows and rollout rows of the store."""

    # --- runs ------------------------------------------------------------------------------
    def run_id(self, name: str) -> int:
        row = self._first("SELECT run_id FROM runs WHERE name = ? AND status = 'ready'", [name])
        if row is None:
            known = [
                r[0]
                for r in self.con.execute(
                    "SELECT name FROM runs WHERE status = 'ready' ORDER BY name"
                ).fetchall()
            ]
            raise StoreError(f"no run named {name!r} in {self.path}; runs: {', '.join(known) or '(none)'}")
        return int(row[0])

    def has_run(self, name: str) -> bool:
        return self._first("SELECT 1 FROM runs WHERE name = ? AND status = 'ready'", [name]) is not None

    def create_run(
        self,
        name: str,
        source: str,
        model_dir: str | None = None,
        tokenizer: str | None = None,
        verifier: str | None = None,
        meta: dict | None = None,
        status: str = "ready",
    ) -> int:
        """Insert a run row (call inside a transaction when it is part of an import)."""
        next_id = self._first("SELECT coalesce(max(run_id), 0) + 1 FROM runs", [])[0]
        self.con.execute(
            "INSERT INTO runs (run_id, name, source, model_dir, tokenizer, verifier, meta, status) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [next_id, name, source, model_dir, tokenizer, verifier, json.dumps(meta or {}), status],
        )
        return int(next_id)

    # --- staged imports -------------------------------------------------------------------------
    # DuckDB keeps a transaction's rows in memory until it commits, so one transaction per import
    # grows with the file. An import therefore commits chunk by chunk into a hidden staging run
    # (status 'importing', invisible to every read) and publishes it in one small transaction at the
    # end; a failure discards the staging rows, and a staging run left by a killed process is
    # discarded the next time a process opens the store for writing.
    STAGING_PREFIX = "__importing__/"

    def create_staging_run(
        self, source: str, model_dir: str | None, tokenizer: str | None, verifier: str | None
    ) -> int:
        name = f"{self.STAGING_PREFIX}{os.getpid()}/{uuid.uuid4().hex}"
        return self.create_run(
            name, source, model_dir=model_dir, tokenizer=tokenizer, verifier=verifier, status="importing"
        )

    def publish_staging_run(
        self, staging_id: int, name: str, target_id: int | None, first_rollout_id: int
    ) -> int:
        """Make a staging run visible: as the new run `name`, or appended to run `target_id`. Call in a
        transaction. Fails if another import changed the target meanwhile."""
        if target_id is None:
            if self.has_run(name):
                raise StoreError(f"run {name!r} was created by another import meanwhile; import again")
            self.con.execute(
                "UPDATE runs SET name = ?, status = 'ready' WHERE run_id = ?", [name, staging_id]
            )
            return staging_id
        if self.next_rollout_id(target_id) != first_rollout_id:
            raise StoreError(f"run {name!r} received another import meanwhile; import again")
        for table in IMPORTED_TABLES:
            self.con.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = ?", [target_id, staging_id])
        self.con.execute("DELETE FROM runs WHERE run_id = ?", [staging_id])
        self._drop_outputs_a_growth_changes(target_id, first_rollout_id)
        return target_id

    def discard_run_rows(self, run_id: int) -> None:
        """Delete a run id's rows from every table (one transaction)."""
        with self.transaction() as con:
            for table in RUN_TABLES:
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

    def discard_staging_run(self, staging_id: int) -> None:
        """Discard an import's staging run unless it was published: a COMMIT that Ctrl-C interrupts can still
        land (`backend.store.connection.interrupted`), and the run it published is the import, not debris."""
        if self._first("SELECT 1 FROM runs WHERE run_id = ? AND status = 'importing'", [staging_id]):
            self.discard_run_rows(staging_id)

    def discard_abandoned_imports(self) -> list[int]:
        """Staging runs of other processes: with the write lock held here, none of them is running."""
        prefix = f"{self.STAGING_PREFIX}{os.getpid()}/"
        rows = self.con.execute(
            "SELECT run_id FROM runs WHERE status = 'importing' AND NOT starts_with(name, ?)", [prefix]
        ).fetchall()
        for (run_id,) in rows:
            self.discard_run_rows(int(run_id))
        return [int(r[0]) for r in rows]

    # --- the main channel (migration 007) ---------------------------------------------------------
    def channels_of(self, run_id: int) -> list[str]:
        """The run's scored channels, sorted."""
        return [
            r[0]
            for r in self.con.execute(
                "SELECT DISTINCT channel FROM scores WHERE run_id = ? ORDER BY channel", [run_id]
            ).fetchall()
        ]

    def main_channel_of(self, run_id: int) -> str:
        """The channel chosen for the run, else the default rule
        (`backend.core.batch.default_main_channel`)."""
        row = self._first("SELECT main_channel FROM runs WHERE run_id = ?", [run_id])
        return row[0] if row and row[0] else default_main_channel(self.channels_of(run_id))

    def main_channel(self, run: str) -> str:
        return self.main_channel_of(self.run_id(run))

    def set_main_channel_of(self, run_id: int, channel: str | None) -> str:
        """Store the run's main channel: one of its channels or `all` (None: the default rule); returns it.
        Call inside a transaction (the Explorer's zero-variance flags depend on it)."""
        channels = self.channels_of(run_id)
        chosen = default_main_channel(channels) if channel is None else str(channel)
        if chosen not in channels and chosen != ALL_CHANNELS:
            name = self._first("SELECT name FROM runs WHERE run_id = ?", [run_id])[0]
            raise InputError(
                f"main channel {chosen!r}: run {name!r} has no such channel; its channels: "
                f"{', '.join(channels) or 'none'}, or {ALL_CHANNELS} (their sum per rollout)"
            )
        self.con.execute("UPDATE runs SET main_channel = ? WHERE run_id = ?", [chosen, run_id])
        self.con.execute(  # the Explorer's flag: the group's scores on the main channel are all equal
            f"""
            UPDATE rollout_summary SET zero_variance = z.zero_variance FROM (
                WITH r AS (SELECT rollout_id, {MAIN_SCORE_SQL} AS main FROM scores WHERE run_id = ?
                           GROUP BY rollout_id)
                SELECT o.rollout_id,
                       count(*) OVER g >= 2 AND min(r.main) OVER g = max(r.main) OVER g AS zero_variance
                FROM rollouts o LEFT JOIN r USING (rollout_id) WHERE o.run_id = ?
                WINDOW g AS (PARTITION BY o.group_id)
            ) z
            WHERE rollout_summary.run_id = ? AND rollout_summary.rollout_id = z.rollout_id
            """,
            [*self.main_score_params(run_id), run_id, run_id, run_id],
        )
        return chosen

    def main_score_params(self, run_id: int) -> list:
        """The parameters of MAIN_SCORE_SQL for the run."""
        main = self.main_channel_of(run_id)
        return [main == ALL_CHANNELS and main not in self.channels_of(run_id), main]

    def run_info(self, name: str) -> dict:
        run_id = self.run_id(name)
        row = self._first(
            "SELECT name, source, model_dir, tokenizer, verifier, created, meta FROM runs WHERE run_id = ?",
            [run_id],
        )
        keys = ("name", "source", "model_dir", "tokenizer", "verifier", "created", "meta")
        info = dict(zip(keys, row, strict=True))
        info["meta"] = json.loads(info["meta"] or "{}")
        info["run_id"] = run_id
        info["main_channel"] = self.main_channel_of(run_id)
        return info

    def list_runs(self) -> list[dict]:
        """Per run (`RUN_FIELDS`): name, source, model, verifier, created, rollouts, groups, steps, tokens,
        channels (the reward channels with a score), main_channel, metrics (the names of its per-rollout
        metrics, e.g. verl's `acc`: the Explorer's `metric_<name>` columns), last_step (its highest step),
        updated (when it last received rollouts: its latest import, as seconds since the epoch; None for a
        run no import wrote) and imports (how many files were imported into it: more than one for a run that
        grows step by step, `import --follow` or `--append`)."""
        rows = self.con.execute(
            """
            SELECT r.name, r.source, r.model_dir, r.verifier, r.created,
                   count(o.rollout_id), count(DISTINCT o.group_id), count(DISTINCT o.step),
                   coalesce(sum(len(o.token_ids)), 0),
                   (SELECT list(DISTINCT s.channel ORDER BY s.channel) FROM scores s
                    WHERE s.run_id = r.run_id), r.main_channel,
                   (SELECT list(DISTINCT m.name ORDER BY m.name) FROM rollout_metrics m
                    WHERE m.run_id = r.run_id),
                   max(o.step),
                   -- the age of the latest import, both sides cast in this connection's time zone (the
                   -- column keeps the writer's local time; reader and writer share the machine's zone)
                   (SELECT epoch_ms(current_timestamp::TIMESTAMP) - epoch_ms(max(i.imported_at))
                    FROM imports i WHERE i.run_id = r.run_id),
                   (SELECT count(*) FROM imports i WHERE i.run_id = r.run_id)
            FROM runs r LEFT JOIN rollouts o ON o.run_id = r.run_id
            WHERE r.status = 'ready'
            GROUP BY r.run_id, r.name, r.source, r.model_dir, r.verifier, r.created, r.main_channel
            ORDER BY r.run_id
            """
        ).fetchall()
        now = time.time()
        return [
            {
                "name": n,
                "source": s,
                "model": m,
                "verifier": v,
                "created": str(c),
                "rollouts": int(nr),
                "groups": int(ng),
                "steps": int(ns),
                "tokens": int(nt),
                "channels": list(ch or []),
                "main_channel": main or default_main_channel(list(ch or [])),
                "metrics": list(metrics or []),
                "last_step": None if last is None else int(last),
                "updated": None if age_ms is None else round(now - age_ms / 1000, 3),
                "imports": int(imports),
            }
            for n, s, m, v, c, nr, ng, ns, nt, ch, main, metrics, last, age_ms, imports in rows
        ]

    def trainer_record(self, run: str) -> dict:
        """What the import kept of how the run's trainer made its advantage: `formats` (the importers that
        read its files), and the distinct values of the rollouts' meta keys `advantage_epsilon`,
        `scale_rewards`, `reward_weights` and `reward_names` (JSON text), each a sorted list without None,
        `logged` (how many rollouts carry a logged advantage, one number per rollout) and `rollouts`."""
        run_id = self.run_id(run)
        formats = [
            f
            for (f,) in self.con.execute(
                "SELECT DISTINCT format FROM imports WHERE run_id = ? AND format IS NOT NULL ORDER BY 1",
                [run_id],
            ).fetchall()
        ]
        out: dict = {"formats": formats}
        for key in ("advantage_epsilon", "scale_rewards", "reward_weights", "reward_names"):
            rows = self.con.execute(
                "SELECT DISTINCT CAST(json_extract(meta, ?) AS VARCHAR) FROM rollouts "
                "WHERE run_id = ? ORDER BY 1",
                ["$." + key, run_id],
            ).fetchall()
            out[key] = [json.loads(v) for (v,) in rows if v is not None and v != "null"]
        out["logged"], out["rollouts"] = self.con.execute(
            "SELECT count(logged_advantage), count(*) FROM rollouts WHERE run_id = ?", [run_id]
        ).fetchone()
        return out

    def delete_run(self, name: str) -> None:
        self.discard_run_rows(self.run_id(name))

    def set_run_meta(self, name: str, key: str, value) -> None:
        """Set one key of the run's JSON meta (e.g. its token classes); None removes it."""
        run_id = self.run_id(name)
        meta = self.run_info(name)["meta"]
        if value is None:
            meta.pop(key, None)
        else:
            meta[key] = value
        with self.transaction() as con:
            con.execute("UPDATE runs SET meta = ? WHERE run_id = ?", [json.dumps(meta), run_id])

    # --- import support (called by backend.ingest, one transaction per chunk) --------------------
    def import_seen(self, run_id: int, file_hash: str) -> bool:
        return (
            self._first("SELECT 1 FROM imports WHERE run_id = ? AND file_hash = ?", [run_id, file_hash])
            is not None
        )

    def import_sources(self, run_id: int) -> list[str]:
        """The paths imported into the run (absolute since imports record them resolved)."""
        return [
            r[0]
            for r in self.con.execute(
                "SELECT DISTINCT path FROM imports WHERE run_id = ? AND path IS NOT NULL", [run_id]
            ).fetchall()
        ]

    def record_keys(self, run_id: int) -> set[int]:
        """The content keys of the run's imported records (see migration 003)."""
        table = self.con.sql(
            "SELECT record_key FROM rollouts WHERE run_id = ? AND record_key IS NOT NULL", params=[run_id]
        ).to_arrow_table()
        return set(table.column(0).to_numpy().tolist()) if table.num_rows else set()

    def next_rollout_id(self, run_id: int) -> int:
        return int(
            self._first("SELECT coalesce(max(rollout_id) + 1, 0) FROM rollouts WHERE run_id = ?", [run_id])[0]
        )

    def group_keys(self, run_id: int) -> dict[str, int]:
        rows = self.con.execute(
            "SELECT group_key, group_id FROM groups WHERE run_id = ?", [run_id]
        ).fetchall()
        return {k: int(g) for k, g in rows}

    def record_import(
        self, run_id: int, file_hash: str, path: str, fmt: str, records: int, tokens: int
    ) -> None:
        self.con.execute(
            "INSERT INTO imports (run_id, file_hash, path, format, records, tokens) "
            "VALUES (?, ?, ?, ?, ?, ?)",
            [run_id, file_hash, path, fmt, records, tokens],
        )

    # --- reads -------------------------------------------------------------------------------
    def rollout_keys(self, run: str) -> pd.DataFrame:
        """One row per rollout: rollout_id, group_id, step (what scoping an estimate needs; no text)."""
        return self.con.execute(
            "SELECT rollout_id, group_id, step FROM rollouts WHERE run_id = ? ORDER BY rollout_id",
            [self.run_id(run)],
        ).df()

    def rollout_lengths(self, run: str) -> pd.DataFrame:
        """One row per rollout: rollout_id, group_id, length (what run-wide fits of a streamed run need)."""
        return self.con.execute(
            "SELECT rollout_id, group_id, len(token_ids) AS length FROM rollouts WHERE run_id = ? "
            "ORDER BY rollout_id",
            [self.run_id(run)],
        ).df()

    def rollout_index(self, run: str) -> pd.DataFrame:
        """One row per rollout: rollout_id, group_id, step, length, prompt, response, and one column per
        channel score (for lists and pickers)."""
        run_id = self.run_id(run)
        frame = self.con.execute(
            "SELECT rollout_id, group_id, step, len(token_ids) AS length, prompt, response "
            "FROM rollouts WHERE run_id = ? ORDER BY rollout_id",
            [run_id],
        ).df()
        scores = self.con.execute(
            "SELECT rollout_id, channel, score FROM scores WHERE run_id = ?", [run_id]
        ).df()
        if len(scores):
            wide = scores.pivot(index="rollout_id", columns="channel", values="score")
            # a channel named like an index column ("length") keeps its scores as "<channel>_score"
            frame = frame.join(wide, on="rollout_id", rsuffix="_score")
        return frame

    def rollout(self, run: str, rollout_id: int) -> dict:
        """Everything about one rollout as plain python values."""
        run_id = self.run_id(run)
        cur = self.con.execute(
            "SELECT o.*, g.ground_truth FROM rollouts o LEFT JOIN groups g "
            "ON g.run_id = o.run_id AND g.group_id = o.group_id "
            "WHERE o.run_id = ? AND o.rollout_id = ?",
            [run_id, int(rollout_id)],
        )
        rows = cur.fetchall()
        row = rows[0] if rows else None
        if row is None:
            raise StoreError(f"run {run!r} has no rollout {rollout_id}")
        out = dict(zip([d[0] for d in cur.description], row, strict=True))
        out["meta"] = json.loads(out["meta"] or "{}")
        if out.get("turns"):
            out["turns"] = json.loads(out["turns"])
        elif out.get("loss_mask") is not None:  # a mask without turns: its runs (backend.core.turns)
            out["turns"] = agent_turns.spans_from_mask(out["loss_mask"])
        out["rewards"] = dict(
            self.con.execute(
                "SELECT channel, score FROM scores WHERE run_id = ? AND rollout_id = ? ORDER BY channel",
                [run_id, int(rollout_id)],
            ).fetchall()
        )
        out["token_rewards"] = dict(
            self.con.execute(
                "SELECT channel, rewards FROM token_rewards WHERE run_id = ? AND rollout_id = ? "
                "ORDER BY channel",
                [run_id, int(rollout_id)],
            ).fetchall()
        )
        out["extras"] = dict(
            self.con.execute(
                "SELECT name, vals FROM token_features WHERE run_id = ? AND rollout_id = ? ORDER BY name",
                [run_id, int(rollout_id)],
            ).fetchall()
        )
        out["metrics"] = dict(
            self.con.execute(
                "SELECT name, value FROM rollout_metrics WHERE run_id = ? AND rollout_id = ? ORDER BY name",
                [run_id, int(rollout_id)],
            ).fetchall()
        )
        return out

    # --- per-token updates (score command) -------------------------------------------------------
    def update_token_arrays(self, run: str, arrays: dict[int, dict[str, list[float]]]) -> int:
        """Set per-token arrays (logprobs, ref_logprobs, entropies, values) of rollouts, atomically."""
        run_id = self.run_id(run)
        rows = []
        for rid, fields in arrays.items():
            for name in fields:
                if name not in PER_TOKEN_FIELDS:
                    raise ValueError(f"not a per-token field: {name}")
            rows.append({"rollout_id": int(rid), **{k: list(map(float, v)) for k, v in fields.items()}})
        if not rows:
            return 0
        names = sorted({k for r in rows for k in r if k != "rollout_id"})
        data = pa.table(
            {
                "rollout_id": pa.array([r["rollout_id"] for r in rows], pa.int32()),
                **{n: pa.array([r.get(n) for r in rows], pa.list_(pa.float32())) for n in names},
            }
        )
        sets = ", ".join(f'"{n}" = coalesce(u."{n}", rollouts."{n}")' for n in names)
        view = f"_upd_{threading.get_ident()}"
        with self.transaction() as con:
            con.register(view, data)
            try:
                con.execute(
                    f"UPDATE rollouts SET {sets} FROM {view} u "
                    "WHERE rollouts.run_id = ? AND rollouts.rollout_id = u.rollout_id",
                    [run_id],
                )
            finally:
                con.unregister(view)
            self._drop_cached_estimates(run_id)
        return len(rows)

    def _drop_outputs_a_growth_changes(self, run_id: int, first_new: int) -> None:
        """After rollouts `first_new`.. were appended to the run: drop the cached outputs they make stale,
        keep the rest (a live run that grows by a step then costs that step). Stale: every output of
        the steps and groups the new rollouts fall in, and every output of an estimator that is not step-
        or group-scoped (run-scoped, or of unknown scope: `estimates.scope` NULL) with its summaries and
        agreements. Call in a transaction."""
        kept = {"run": run_id, "first": first_new}
        self.con.execute(
            f"CREATE OR REPLACE TEMP TABLE _local_outputs AS {LOCAL_OUTPUTS_SQL}", {"run": run_id}
        )
        try:
            for table in ("estimates", "credit_summary", "channel_summary"):
                self.con.execute(
                    f"DELETE FROM {table} WHERE run_id = $run AND (rollout_id IN ({GROWTH_STALE_SQL}) OR "
                    "(estimator, config_hash) NOT IN (SELECT * FROM _local_outputs))",
                    kept,
                )
            self.con.execute(
                "DELETE FROM credit_agreement WHERE run_id = $run AND "
                f"(rollout_id IN ({GROWTH_STALE_SQL}) OR "
                "(estimator_a, hash_a) NOT IN (SELECT * FROM _local_outputs) OR "
                "(estimator_b, hash_b) NOT IN (SELECT * FROM _local_outputs))",
                kept,
            )
        finally:
            self.con.execute("DROP TABLE IF EXISTS _local_outputs")

    def _drop_cached_estimates(self, run_id: int) -> None:
        for table in ESTIMATE_TABLES:
            self.con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])
