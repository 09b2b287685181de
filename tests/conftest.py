"""Shared fixtures: real DuckDB files in tmp dirs and small native runs."""

from __future__ import annotations

import contextlib
import io
import json
import random
import subprocess
from pathlib import Path

import pytest

from backend.cli import main as cli_main
from backend.store import Store


def run_cli_here(*args) -> subprocess.CompletedProcess:
    """`creditlens ARGS` in this process, answered as `subprocess.run(..., capture_output=True, text=True)`
    would answer (returncode, stdout, stderr). For tests where a separate process is not the point: the
    session pays for one torch import instead of one per command. Close any store the test holds open
    first (DuckDB refuses a second connection with another mode in the same process)."""
    args = [str(a) for a in args]
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = cli_main(args)
        except SystemExit as exc:  # argparse: --help, usage errors
            code = exc.code if isinstance(exc.code, int) else 2
    return subprocess.CompletedProcess(["creditlens", *args], code, out.getvalue(), err.getvalue())


def make_records(n_groups: int = 3, group_size: int = 4, seed: int = 0, steps: int = 1) -> list[dict]:
    """Small native records with token ids, per-token arrays, two channels and a style token reward."""
    rng = random.Random(seed)
    records = []
    for step in range(steps):
        for g in range(n_groups):
            prompt = f"step {step} prompt {g}: what is {g} + {g}?"
            for _ in range(group_size):
                n = rng.randint(1, 12)
                ids = [rng.randint(0, 50) for _ in range(n)]
                records.append({
                    "prompt": prompt,
                    "response": " ".join(map(str, ids)),
                    "step": step,
                    "token_ids": ids,
                    "tokens": [f"t{i}" for i in ids],
                    "logprobs": [-rng.random() for _ in ids],
                    "entropies": [rng.random() * 2 for _ in ids],
                    "rewards": {"task": float(rng.random() < 0.5), "style": -float(rng.random() < 0.3)},
                    "token_rewards": {"style": [0.0] * (n - 1) + [-1.0]},
                    "meta": {"ground_truth": str(2 * g)},
                })
    return records


def write_jsonl(path: Path, records: list) -> Path:
    with open(path, "w") as fh:
        for rec in records:
            fh.write((rec if isinstance(rec, str) else json.dumps(rec)) + "\n")
    return path


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "runs.duckdb"


@pytest.fixture
def store(db_path: Path):
    s = Store(db_path)
    yield s
    s.close()


def snapshot(store: Store) -> dict:
    """Row counts of every table: 'the store is exactly as before' in a comparable form."""
    tables = [r[0] for r in store.con.execute(
        "SELECT table_name FROM information_schema.tables ORDER BY table_name").fetchall()]
    return {t: store.con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in tables}
