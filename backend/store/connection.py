"""The store's connection: open the DuckDB file, apply numbered migrations, run transactions, bulk-insert
Arrow tables. The run tables are listed here once.

One read-write connection per process; other processes may open the file read-only. Threads use
`store.cursor()`. Every query with user data is parameterized (`?`).
"""

from __future__ import annotations

import functools
import os
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from importlib import resources
from pathlib import Path

import duckdb
import pyarrow as pa

from backend.core.errors import StoreError

IMPORTED_TABLES = ("rollouts", "scores", "token_rewards", "token_features", "rollout_metrics", "groups")
"""Rows an import writes per rollout (a staged import moves them to their run when it publishes)."""
ESTIMATE_TABLES = ("estimates", "credit_summary", "credit_agreement", "channel_summary")
"""Estimator outputs and their summaries: dropped whenever a run's inputs change."""
RUN_TABLES = (
    *IMPORTED_TABLES,
    "rollout_summary",
    *ESTIMATE_TABLES,
    "imports",
    "resample_samples",
    "model_credit",
    "step_checkpoints",
    "step_after_checkpoints",
    "landed_logprobs",
    "runs",
)
"""Every table with a `run_id` column, `runs` last: what deleting a run deletes (a test checks this list
against the schema)."""
INSERTABLE = frozenset(
    {*IMPORTED_TABLES, "estimates", "resample_samples", "model_credit", "credit_summary", "channel_summary"}
)


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C, as Python raises it, or as DuckDB does when the signal lands inside a query: a RuntimeError
    'Query interrupted' (or an InterruptException). A COMMIT it interrupts has still landed whenever we looked
    (DuckDB 2.0.1 finishes the commit, then raises), so what an interrupted write left is read back, never
    assumed."""
    return isinstance(exc, (KeyboardInterrupt, duckdb.InterruptException)) or (
        isinstance(exc, RuntimeError) and str(exc) == "Query interrupted"
    )


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


@functools.cache
def _migration_versions() -> frozenset[int]:
    return frozenset(version for version, _, _ in _migrations())


def _is_duckdb_file(path: Path) -> bool:
    """Whether `path` holds a DuckDB database (its header's magic bytes), or nothing yet."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(12)
    except OSError:
        return True  # not readable or not there: the open's own error says why
    return not head or head[8:12] == b"DUCK"


class Connection:
    """A DuckDB file, created and migrated on first use (the base of `Store`)."""

    def __init__(self, path: str | os.PathLike | None = None, read_only: bool = False):
        self.path = Path(path) if path is not None else default_db_path()
        self.read_only = read_only
        self._lock = threading.RLock()
        self._depth = 0  # transactions open on this connection (a nested one joins the outer)
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
            if not _is_duckdb_file(self.path):
                raise StoreError(
                    f"{self.path}: not a Credit Lens store (a DuckDB file); to read a run from this file, "
                    f"`creditlens import {self.path} --run NAME` imports it into the store"
                ) from None
            raise StoreError(f"{self.path}: cannot open the store ({msg})") from None
        if read_only and self._behind():
            # A store written by an older Credit Lens: read-only commands read the new schema, so the store is
            # migrated once, as a writer (a writer elsewhere holding the lock migrates it itself).
            self.con.close()
            try:
                type(self)(self.path).close()
            except StoreError:
                pass
            self.con = duckdb.connect(str(self.path), read_only=True)
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

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def cursor(self) -> duckdb.DuckDBPyConnection:
        """A cursor for another thread (DuckDB connections are not shared across threads)."""
        return self.con.cursor()

    def _behind(self) -> bool:
        """Whether a numbered migration is missing from this store (one small query)."""
        try:
            done = {row[0] for row in self.con.execute("SELECT version FROM schema_migrations").fetchall()}
        except duckdb.Error:  # not a store of ours yet: the reads that follow say so
            return False
        return any(version not in done for version in _migration_versions())

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
        """BEGIN ... COMMIT, or ROLLBACK on any exception: the store is then exactly as before, unless Ctrl-C
        landed in the COMMIT itself (`interrupted`). DuckDB's interruptions come out as KeyboardInterrupt.
        A transaction opened inside another on this connection joins it: its writes commit or roll back with
        the outer one (DuckDB has no nested transactions)."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self.con
                finally:
                    self._depth -= 1
                return
            try:
                self.con.execute("BEGIN TRANSACTION")
            except duckdb.Error as exc:
                raise self._write_error(exc) from None
            self._depth = 1
            try:
                yield self.con
                self.con.execute("COMMIT")
            except BaseException as exc:
                try:
                    self.con.execute("ROLLBACK")
                except duckdb.Error:
                    pass  # already ended: a failed COMMIT (rolled back) or one Ctrl-C interrupted (landed)
                if interrupted(exc):
                    raise KeyboardInterrupt from None
                if isinstance(exc, duckdb.Error):
                    raise self._write_error(exc) from None
                raise
            finally:
                self._depth = 0

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

    @contextmanager
    def memory_limit(self, limit: str | None) -> Iterator[None]:
        """Cap DuckDB's buffer pool for a while (e.g. "512MB"): committed chunks of an import are then
        evicted to the file instead of cached, so a multi-GB import runs in bounded memory."""
        with self._setting("memory_limit", limit):
            yield

    @contextmanager
    def checkpoint_threshold(self, size: str | None) -> Iterator[None]:
        """Let the write-ahead log grow to `size` (e.g. "256MB") before DuckDB folds it into the file, for a
        while: an import commits chunk after chunk, and at DuckDB's default (16 MB) nearly every commit of a
        chunk paid a checkpoint of its own (docs/benchmarks.md, "Import")."""
        with self._setting("checkpoint_threshold", size):
            yield

    @contextmanager
    def _setting(self, name: str, size: str | None) -> Iterator[None]:
        """DuckDB's size setting `name` at `size` for a while (None: left as it is), then as it was."""
        if size is None or not re.fullmatch(r"\d+(\.\d+)?\s*[KMGT]i?B", size):
            if size is not None:
                raise ValueError(f"{name.replace('_', ' ')} {size!r}: expected something like '512MB'")
            yield
            return
        previous = self._first(f"SELECT current_setting('{name}')", [])[0]
        self.con.execute(f"SET {name} = '{size}'")  # validated above: digits and a unit only
        try:
            yield
        finally:
            self.con.execute(f"SET {name} = '{previous}'")  # DuckDB's own setting text

    def insert_arrow(self, table: str, data: pa.Table) -> None:
        """Bulk insert an Arrow table whose columns are a subset of `table`'s (by name)."""
        if data.num_rows == 0:
            return
        if table not in INSERTABLE:
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
