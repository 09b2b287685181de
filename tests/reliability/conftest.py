"""Shared pieces of the reliability suite: the CLI driven in-process, a store digest, a case tally.

`CREDITLENS_FUZZ_LONG=1` raises every fuzz budget (the quick CI mode stays well under a minute).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import duckdb
import pytest

from tests.conftest import make_records, run_cli_here, write_jsonl
from tests.reliability.cases import TALLY, WORKER_OUTPUT_KEY, tally, write_summary  # noqa: F401 - tests use tally

ROOT = Path(__file__).resolve().parents[2]
PYTHON = sys.executable
LONG = os.environ.get("CREDITLENS_FUZZ_LONG") == "1"
# The long mode's budgets times this (`python -m bench reliability --loops --scale 0.25`): a quarter of the
# cases where the whole loops would not fit the time at hand (a 2-core machine shared with others).
LONG_SCALE = float(os.environ.get("CREDITLENS_FUZZ_SCALE", "1"))


def long_budget(cases: int, quick: int) -> int:
    """`cases` in the long mode (scaled, never below `quick`), `quick` otherwise."""
    return max(quick, round(cases * LONG_SCALE)) if LONG else quick


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "other_process: the test lets another process open the store (no instance is held)"
    )


def pytest_sessionfinish(session):
    """A pytest-xdist worker hands its cases to the controller, which prints them (tests/conftest.py)."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_OUTPUT_KEY] = dict(TALLY)


def pytest_terminal_summary(terminalreporter):
    write_summary(terminalreporter, TALLY)  # a run without workers


@dataclass
class CliResult:
    rc: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def run_cli(args: list[str]) -> CliResult:
    """`creditlens ARGS` in this process (`tests.conftest.run_cli_here`): any exception escaping main() is a
    traceback for a user, and fails the test."""
    done = run_cli_here(*args)
    return CliResult(done.returncode, done.stdout, done.stderr)


_HELD: dict[Path, duckdb.DuckDBPyConnection] = {}  # stores whose DuckDB instance a test holds open


def store_digest(db: Path) -> dict[str, tuple[int, int]]:
    """Per table: (rows, order-independent checksum of every row's content), read-only: one query over all
    tables, through the instance `instance_held` holds open, else a read-only connection of its own."""
    held = _HELD.get(Path(db).resolve())
    con = held.cursor() if held is not None else duckdb.connect(str(db), read_only=True)
    try:
        tables = [
            r[0]
            for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' ORDER BY 1"
            ).fetchall()
        ]
        query = " UNION ALL ".join(  # names come from the catalog, not from user data
            f'SELECT {k}, count(*), coalesce(sum(hash(t)::HUGEINT), 0) FROM "{table}" t'
            for k, table in enumerate(tables)
        )
        rows = con.execute(query).fetchall() if tables else []
        return {tables[k]: (int(n), int(checksum)) for k, n, checksum in rows}
    finally:
        con.close()


@contextmanager
def instance_held(db: Path) -> Iterator[Path]:
    """Hold the store's DuckDB database instance open for a block of cases. DuckDB builds an instance (its
    catalog, ~25 ms of CPU) on the first connection to a file and drops it with the last; held here, every
    `creditlens import` in the block opens and closes its own connection through the same product code,
    minus that rebuild. On leaving, the instance closes (its WAL is checkpointed into the file), and the
    file, reopened read-only, must hold exactly what the block's last digest saw."""
    key = Path(db).resolve()
    _HELD[key] = duckdb.connect(str(db))  # the mode the product's writes open it in
    try:
        yield db
        last = store_digest(db)
    finally:
        _HELD.pop(key).close()
    assert store_digest(db) == last, f"{db}: the file holds other rows than the open store showed"


ERROR_PREFIX = "creditlens import: error: "
# Whole-file problems need no record number; everything else must name the line/record and a field.
FILE_LEVEL = (
    "no records to import",
    "not a readable Parquet file",
    "damaged Parquet data",
    "unknown Parquet layout",
    "unknown format",
    "no reward columns",
    "no reward values",
    "missing required TRL column",
    "the reward column",  # a TRL column name with a control character: the file's schema, not a record
    "no such file",
    "no verl files",
    "no trl files",
    "no native files",
    "this is a",  # an explicit --format that cannot read the file says what the file is
    "this is an",
    "this directory has no",
)
RECORD_LEVEL = re.compile(r": (line|record) \d+")
FIELD_HINTS = ("field", "malformed JSON", "not valid UTF-8", "a record must be", "every reward column")


def assert_clean_error(result: CliResult, path: Path) -> str:
    """Exit 2, exactly one line on stderr, naming the file and (for record problems) line and field."""
    assert "Traceback" not in result.err + result.out, result.err
    assert result.rc == 2, (result.rc, result.err)
    lines = [line for line in result.err_lines if not line.startswith("detected format")]
    assert len(lines) == 1, result.err
    msg = lines[0]
    assert msg.startswith(ERROR_PREFIX), msg
    assert str(path) in msg, msg
    if not any(phrase in msg for phrase in FILE_LEVEL):
        assert RECORD_LEVEL.search(msg), f"no line/record number: {msg}"
        assert any(h in msg for h in FIELD_HINTS), f"no field named: {msg}"
    return msg


@pytest.fixture(scope="module")
def base_store(tmp_path_factory) -> Path:
    """A store holding one small run, so 'unchanged' means something."""
    d = tmp_path_factory.mktemp("base")
    src = write_jsonl(d / "base.jsonl", make_records(n_groups=2, group_size=3))
    db = d / "runs.duckdb"
    assert run_cli(["import", src, "--db", db, "--run", "base", "--quiet"]).rc == 0
    return db
