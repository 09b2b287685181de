"""The DuckDB store: one file, numbered migrations, Arrow in and out. All SQL of the project lives in
this package: here, and in `model_queries.py` for the model commands.

One read-write connection per process; other processes may open the file read-only. Threads use
`store.cursor()`. Every query with user data is parameterized (`?`).
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import torch

from backend.batch import RolloutBatch
from backend.errors import StoreError
from backend.store.model_credit_extras import model_credit_extras

PER_TOKEN_COLUMNS = ("logprobs", "ref_logprobs", "entropies", "values")


def default_db_path() -> Path:
    return Path(os.environ.get("CREDITLENS_DB", Path.home() / ".creditlens" / "runs.duckdb"))


def _migrations() -> list[tuple[int, str, str]]:
    files = resources.files("backend.store") / "migrations"
    out = []
    for entry in files.iterdir():
        match = re.match(r"(\d+)_(.+)\.sql$", entry.name)
        if match:
            out.append((int(match.group(1)), match.group(2), entry.read_text()))
    return sorted(out)


def pad_list_array(array: pa.Array | pa.ChunkedArray, T: int, dtype: np.dtype) -> np.ndarray:
    """A list<number> Arrow array -> (B, T) numpy array, zero padded; nulls become empty rows."""
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
    B = len(array)
    out = np.zeros((B, T), dtype=dtype)
    if B == 0:
        return out
    lengths = array.value_lengths().fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    values = array.flatten().fill_null(0).to_numpy(zero_copy_only=False)
    rows = np.repeat(np.arange(B), lengths)
    starts = np.cumsum(lengths) - lengths
    cols = np.arange(len(values)) - np.repeat(starts, lengths)
    keep = cols < T
    out[rows[keep], cols[keep]] = values[keep]
    return out


class Store:
    """A Credit Lens run store on a DuckDB file (created and migrated on first use)."""

    def __init__(self, path: str | os.PathLike | None = None, read_only: bool = False):
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only = read_only
        self._lock = threading.RLock()
        if not read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(f"{self.path}: cannot create its directory ({exc.strerror})") from None
        elif not self.path.exists():
            raise StoreError(f"{self.path}: no such store; run `creditlens init --db {self.path}` first")
        try:
            self.con = duckdb.connect(str(self.path), read_only=read_only)
        except duckdb.Error as exc:  # IOException for locks and permissions; others for non-store files
            msg = str(exc).splitlines()[0]
            if "lock" in msg.lower():
                raise StoreError(
                    f"{self.path}: the store is open for writing in another process; close it or "
                    f"open read-only ({msg})"
                ) from None
            raise StoreError(f"{self.path}: cannot open the store ({msg})") from None
        if not read_only:
            try:
                self.migrate()
                self.discard_abandoned_imports()
            except BaseException as exc:
                self.con.close()
                if isinstance(exc, duckdb.Error):
                    raise self._write_error(exc) from None
                raise

    # --- lifecycle -------------------------------------------------------------------------
    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for another thread (DuckDB connections are not shared across threads)."""
        return self.con.cursor()

    def migrate(self) -> list[int]:
        """Apply pending numbered migrations in one transaction; returns the versions applied."""
        con = self.con
        con.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name VARCHAR, applied_at TIMESTAMP DEFAULT current_timestamp)"
        )
        done = {row[0] for row in con.execute("SELECT version FROM schema_migrations").fetchall()}
        pending = [m for m in _migrations() if m[0] not in done]
        if not pending:
            return []
        with self.transaction():
            for version, name, sql in pending:
                # Comment lines go first, so a ';' inside a comment cannot split a statement.
                code = "\n".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
                for statement in (part.strip() for part in code.split(";")):
                    if statement:
                        con.execute(statement)
                con.execute("INSERT INTO schema_migrations (version, name) VALUES (?, ?)", [version, name])
        return [m[0] for m in pending]

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """BEGIN ... COMMIT, or ROLLBACK on any exception (the store is then exactly as before)."""
        with self._lock:
            try:
                self.con.execute("BEGIN TRANSACTION")
            except duckdb.Error as exc:
                raise self._write_error(exc) from None
            try:
                yield self.con
                self.con.execute("COMMIT")
            except BaseException as exc:
                try:
                    self.con.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # already rolled back by DuckDB (failed COMMIT, invalidated database)
                if isinstance(exc, duckdb.Error):
                    raise self._write_error(exc) from None
                raise

    def _write_error(self, exc: duckdb.Error) -> StoreError:
        """A DuckDB failure while writing (disk full, file too large, read-only file) as one line."""
        msg = str(exc).splitlines()[0]
        hint = (
            "check free disk space, file size limits and write permission"
            if isinstance(exc, duckdb.IOException) or "No space" in msg or "too large" in msg
            else "the write was refused"
        )
        return StoreError(f"{self.path}: nothing was written ({hint}): {msg}")

    def _first(self, sql: str, params: list) -> tuple | None:
        # fetchall, not fetchone: DuckDB 2 refuses new work while a result is left unfinished.
        rows = self.con.execute(sql, params).fetchall()
        return rows[0] if rows else None

    # --- runs ------------------------------------------------------------------------------
    def run_id(self, name: str) -> int:
        row = self._first("SELECT run_id FROM runs WHERE name = ? AND status = 'ready'", [name])
        if row is None:
            known = [r[0] for r in self.con.execute(
                "SELECT name FROM runs WHERE status = 'ready' ORDER BY name").fetchall()]
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

    def create_staging_run(self, source: str, model_dir: str | None, tokenizer: str | None,
                           verifier: str | None) -> int:
        name = f"{self.STAGING_PREFIX}{os.getpid()}/{uuid.uuid4().hex}"
        return self.create_run(name, source, model_dir=model_dir, tokenizer=tokenizer, verifier=verifier,
                               status="importing")

    def publish_staging_run(self, staging_id: int, name: str, target_id: int | None,
                            first_rollout_id: int) -> int:
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
        for table in _RUN_ROW_TABLES:
            self.con.execute(f"UPDATE {table} SET run_id = ? WHERE run_id = ?", [target_id, staging_id])
        self.con.execute("DELETE FROM runs WHERE run_id = ?", [staging_id])
        self._drop_cached_estimates(target_id)  # new rollouts join groups: cached outputs are stale
        return target_id

    @contextmanager
    def memory_limit(self, limit: str | None) -> Iterator[None]:
        """Cap DuckDB's buffer pool for a while (e.g. "512MB"): committed chunks of an import are then
        evicted to the file instead of cached, so a multi-GB import runs in bounded memory."""
        if limit is None or not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", limit):
            if limit is not None:
                raise ValueError(f"memory limit {limit!r}: expected something like '512MB'")
            yield
            return
        previous = self._first("SELECT current_setting('memory_limit')", [])[0]
        self.con.execute(f"SET memory_limit = '{limit}'")  # validated above: digits and a unit only
        try:
            yield
        finally:
            self.con.execute(f"SET memory_limit = '{previous}'")  # DuckDB's own setting text

    def discard_run_rows(self, run_id: int) -> None:
        """Delete a run id's rows from every table (one transaction)."""
        with self.transaction() as con:
            for table in (*_RUN_ROW_TABLES, *_SUMMARY_TABLES, "imports", "estimates", "resample_samples",
                          "model_credit", "runs"):
                con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

    def discard_abandoned_imports(self) -> list[int]:
        """Staging runs of other processes: with the write lock held here, none of them is running."""
        prefix = f"{self.STAGING_PREFIX}{os.getpid()}/"
        rows = self.con.execute(
            "SELECT run_id FROM runs WHERE status = 'importing' AND NOT starts_with(name, ?)", [prefix]
        ).fetchall()
        for (run_id,) in rows:
            self.discard_run_rows(int(run_id))
        return [int(r[0]) for r in rows]

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
        return info

    def list_runs(self) -> list[dict]:
        """Per run: name, source, model, rollouts, groups, steps, tokens, channels."""
        rows = self.con.execute(
            """
            SELECT r.name, r.source, r.model_dir, r.verifier, r.created,
                   count(o.rollout_id), count(DISTINCT o.group_id), count(DISTINCT o.step),
                   coalesce(sum(len(o.token_ids)), 0),
                   (SELECT list(DISTINCT s.channel ORDER BY s.channel) FROM scores s
                    WHERE s.run_id = r.run_id)
            FROM runs r LEFT JOIN rollouts o ON o.run_id = r.run_id
            WHERE r.status = 'ready'
            GROUP BY r.run_id, r.name, r.source, r.model_dir, r.verifier, r.created
            ORDER BY r.run_id
            """
        ).fetchall()
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
            }
            for n, s, m, v, c, nr, ng, ns, nt, ch in rows
        ]

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

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Bulk insert an Arrow table whose columns are a subset of `table`'s (by name)."""
        if data.num_rows == 0:
            return
        if table not in _INSERTABLE:
            raise ValueError(f"not an insertable table: {table}")
        columns = ", ".join(f'"{c}"' for c in data.column_names)
        view = f"_arrow_in_{threading.get_ident()}"
        self.con.register(view, data)
        try:
            self.con.execute(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {view}")
        finally:
            try:
                self.con.unregister(view)
            except duckdb.Error:
                pass  # an aborted transaction refuses this too; keep the INSERT's own error

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
        return out

    def load_batch(
        self,
        run: str,
        rollout_ids: list[int] | None = None,
        group_ids: list[int] | None = None,
        steps: list[int] | None = None,
        device: str | torch.device = "cpu",
    ) -> RolloutBatch:
        """Rollouts of `run` (all, or the given rollout/group ids or steps) as a padded `RolloutBatch`,
        ordered by rollout id. Resampling results become extras `mc_values`/`mc_mask`; model-credit scores
        `<method>_scores`/`<method>_mask`."""
        run_id = self.run_id(run)
        where, params = ["run_id = ?"], [run_id]
        for column, ids in (("rollout_id", rollout_ids), ("group_id", group_ids), ("step", steps)):
            if ids is not None:
                where.append(f"list_contains(?, {column})")
                params.append([int(i) for i in ids])
        cond = " AND ".join(where)
        table = self.con.sql(
            f"SELECT rollout_id, group_id, step, token_ids, tokens, logprobs, ref_logprobs, entropies, "
            f'"values", logged_advantage FROM rollouts WHERE {cond} ORDER BY rollout_id',
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
            col = table.column(column)
            if col.null_count == len(col) or len(col) == 0:
                return None
            if col.null_count:  # some rollouts lack the field: treat as missing for the batch
                return None
            return torch.from_numpy(pad_list_array(col, T, np.float32))

        row_of = {int(r): i for i, r in enumerate(ids)}
        id_list = [int(i) for i in ids]

        def channel_arrays(sql: str, is_list: bool) -> dict[str, torch.Tensor]:
            data = self.con.sql(sql, params=[run_id, id_list]).to_arrow_table()
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

        scores = channel_arrays(
            "SELECT rollout_id, channel, score FROM scores WHERE run_id = ? AND list_contains(?, rollout_id)",
            False,
        )
        token_rewards = channel_arrays(
            "SELECT rollout_id, channel, rewards FROM token_rewards "
            "WHERE run_id = ? AND list_contains(?, rollout_id)",
            True,
        )
        extras = channel_arrays(
            "SELECT rollout_id, name, vals FROM token_features "
            "WHERE run_id = ? AND list_contains(?, rollout_id)",
            True,
        )
        mc = self.con.execute(
            "SELECT rollout_id, pos, avg(reward) FROM resample_samples "
            "WHERE run_id = ? AND list_contains(?, rollout_id) GROUP BY rollout_id, pos",
            [run_id, id_list],
        ).fetchall()
        if mc:
            mc_values = torch.zeros((len(ids), T))
            mc_mask = torch.zeros((len(ids), T))
            for rid, pos, value in mc:
                if 0 <= pos < T:
                    mc_values[row_of[int(rid)], pos] = float(value)
                    mc_mask[row_of[int(rid)], pos] = 1.0
            extras["mc_values"], extras["mc_mask"] = mc_values, mc_mask
        extras.update(model_credit_extras(self.con, run_id, id_list, T))  # OAR / GCPO scores, when complete

        logged = table.column("logged_advantage")
        if len(logged) and logged.null_count < len(logged):  # the trainer's own advantage, NaN where absent
            extras["logged_advantage"] = torch.from_numpy(
                logged.to_numpy(zero_copy_only=False).astype(np.float32)
            )
        tokens_col = table.column("tokens")
        tokens = None if tokens_col.null_count else tokens_col.to_pylist()
        batch = RolloutBatch(
            response_mask=torch.from_numpy(mask),
            token_ids=torch.from_numpy(pad_list_array(table.column("token_ids"), T, np.int64)),
            group_ids=torch.from_numpy(table.column("group_id").to_numpy().astype(np.int64)),
            rollout_ids=torch.from_numpy(ids.astype(np.int64)),
            steps=torch.from_numpy(table.column("step").to_numpy().astype(np.int64)),
            scores=scores,
            token_rewards=token_rewards,
            logprobs=per_token("logprobs"),
            ref_logprobs=per_token("ref_logprobs"),
            entropies=per_token("entropies"),
            values=per_token("values"),
            tokens=tokens,
            extras=extras,
        )
        return batch.to(device)

    # --- per-token updates (score command) -------------------------------------------------------
    def update_token_arrays(self, run: str, arrays: dict[int, dict[str, list[float]]]) -> int:
        """Set per-token arrays (logprobs, ref_logprobs, entropies, values) of rollouts, atomically."""
        run_id = self.run_id(run)
        rows = []
        for rid, fields in arrays.items():
            for name in fields:
                if name not in PER_TOKEN_COLUMNS:
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

    # --- estimator cache -------------------------------------------------------------------------
    # Outputs keyed on (estimator, config hash, channel). Anything that changes a run's inputs
    # (appended rollouts, rescored tokens, new resampling results) drops the run's cached outputs.
    def drop_credit_summaries(self, run: str) -> None:
        """The run's credit-by-class summaries (after its token classes change)."""
        self.con.execute("DELETE FROM credit_summary WHERE run_id = ?", [self.run_id(run)])

    def _drop_cached_estimates(self, run_id: int) -> None:
        for table in ("estimates", "credit_summary", "credit_agreement"):  # summaries of those outputs
            self.con.execute(f"DELETE FROM {table} WHERE run_id = ?", [run_id])

    def cached_estimate(
        self, run: str, estimator: str, config_hash: str, channel: str
    ) -> dict[int, np.ndarray]:
        run_id = self.run_id(run)
        rows = self.con.execute(
            "SELECT rollout_id, advantages FROM estimates "
            "WHERE run_id = ? AND estimator = ? AND config_hash = ? AND channel = ?",
            [run_id, estimator, config_hash, channel],
        ).fetchall()
        return {int(r): np.asarray(a, dtype=np.float32) for r, a in rows}

    def save_estimate(
        self,
        run: str,
        estimator: str,
        config_hash: str,
        config: dict,
        channel: str,
        advantages: dict[int, np.ndarray],
    ) -> None:
        run_id = self.run_id(run)
        data = pa.table(
            {
                "run_id": pa.array([run_id] * len(advantages), pa.int32()),
                "estimator": [estimator] * len(advantages),
                "config_hash": [config_hash] * len(advantages),
                "config": [json.dumps(config, sort_keys=True, default=str)] * len(advantages),
                "channel": [channel] * len(advantages),
                "rollout_id": pa.array(list(advantages), pa.int32()),
                "advantages": pa.array(
                    [np.asarray(a, np.float32) for a in advantages.values()], pa.list_(pa.float32())
                ),
            }
        )
        with self.transaction() as con:
            # Only these rollouts: a step-scoped estimate is saved one step at a time.
            con.execute(
                "DELETE FROM estimates WHERE run_id = ? AND estimator = ? AND config_hash = ? "
                "AND channel = ? AND list_contains(?, rollout_id)",
                [run_id, estimator, config_hash, channel, [int(r) for r in advantages]],
            )
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


_RUN_ROW_TABLES = ("rollouts", "scores", "token_rewards", "token_features", "groups")
# Derived from a run's rows by backend.store.explorer_queries (rebuilt on import, dropped with the run).
_SUMMARY_TABLES = ("rollout_summary", "credit_summary", "credit_agreement")
_INSERTABLE = {
    "rollouts",
    "scores",
    "token_rewards",
    "token_features",
    "groups",
    "estimates",
    "resample_samples",
    "model_credit",
    "credit_summary",
}
