"""Shared fixtures: real DuckDB files in tmp dirs and small native runs."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from backend.store import Store


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
