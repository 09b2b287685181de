"""The bundled sample data is portable: no shipped file names a folder of the machine that made it, and a
copy of the checkout in another folder opens the bundled runs (`creditlens init` there) with every run's
recorded checkpoints resolving to folders of the copy, and reads the same numbers as this checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from backend.demo.bundled import SAMPLE_DIR
from backend.store import Store
from backend.store.landed_queries import after_checkpoints
from tests.conftest import run_cli_here

ROOT = SAMPLE_DIR.parent
# What `creditlens init` needs from a checkout: the engine and the sample data.
CHECKOUT_PARTS = ("backend", "sample_runs")


def _strings(value):
    """Every string inside a JSON value (keys' values, list items, nested)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _shipped_values(path: Path):
    """The string values a shipped file holds where a path can sit: a JSON file's values, a Parquet file's
    string columns and the JSON objects in its `meta` column."""
    if path.suffix == ".json":
        yield from _strings(json.loads(path.read_text()))
    elif path.suffix == ".parquet":
        table = pq.read_table(path)
        for name, column in zip(table.column_names, table.columns, strict=True):
            if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
                for text in column.to_pylist():
                    yield text
                    if name == "meta" and text:
                        yield from _strings(json.loads(text))


def test_no_shipped_file_names_a_folder_of_the_machine_that_made_it():
    files = [p for p in SAMPLE_DIR.rglob("*") if p.suffix in (".json", ".parquet") and p.is_file()]
    assert len([p for p in files if p.name.startswith("step_")]) == 16  # recorded step files: 6 + 6 + 4
    absolute = [
        f"{path.relative_to(ROOT)}: {text!r}"
        for path in files
        for text in _shipped_values(path)
        if isinstance(text, str) and (os.path.isabs(text) or str(ROOT) in text)
    ]
    assert not absolute, "\n".join(absolute[:10])
    raw = [
        p.relative_to(ROOT)
        for p in SAMPLE_DIR.rglob("*")
        if p.is_file() and str(ROOT).encode() in p.read_bytes()
    ]
    assert not raw, raw  # nor anywhere in the bytes (Parquet metadata, tokenizer files, ...)


def _creditlens_in(checkout: Path, *args: str) -> subprocess.CompletedProcess:
    """`creditlens ARGS` run from `checkout`'s own code (a fresh interpreter whose path starts there): the
    copy's `backend` finds its sample runs beside itself, as a clone does."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    return subprocess.run(
        [sys.executable, "-m", "backend.cli", *args],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.slow
def test_the_bundled_runs_open_from_a_copy_of_the_checkout(tmp_path, bundled_template):
    clone = tmp_path / "elsewhere" / "credit-lens"
    for part in CHECKOUT_PARTS:
        shutil.copytree(ROOT / part, clone / part, ignore=shutil.ignore_patterns("__pycache__"))
    db = tmp_path / "store.duckdb"
    done = _creditlens_in(clone, "init", "--db", str(db))
    assert done.returncode == 0, done.stderr
    assert "kl-0.0, kl-0.2" in done.stdout
    samples = (clone / "sample_runs").resolve()
    # what the copy's own import stored, read here: each recorded run's first step names its checkpoint
    # relative to the run's folder, and it resolved to the copy's folder
    listed = {}
    for run in ("kl-0.0", "kl-0.2", "demo"):
        done = run_cli_here("checkpoints", "--db", db, "--run", run, "--json")
        assert done.returncode == 0, done.stderr
        listed[run] = [(s["step"], s["checkpoint"], s["exists"]) for s in json.loads(done.stdout)["steps"]]
    # kl-0.0 ships the weights after each step (the checkpoint route of `creditlens landed`): step k was
    # sampled by checkpoint k-1; kl-0.2's later weights were saved while recording but not kept
    trainer = samples / "recorded" / "kl-0.0" / "trainer"
    assert listed["kl-0.0"] == [(1, str(samples / "demo-policy"), True)] + [
        (s, str(trainer / f"checkpoint-{s - 1}"), True) for s in range(2, 7)
    ]
    assert listed["kl-0.2"] == [(1, str(samples / "demo-policy"), True)] + [
        (s, None, False) for s in range(2, 7)
    ]
    with Store(db, read_only=True) as store:
        assert after_checkpoints(store, "kl-0.0") == {
            s: str(trainer / f"checkpoint-{s}") for s in range(1, 7)
        }
        assert after_checkpoints(store, "kl-0.2") == {}
    assert all(exists and Path(folder).is_relative_to(samples) for _, folder, exists in listed["demo"])
    assert len(listed["demo"]) == 4
    # the same runs as this checkout reads: the Explorer's rows and the trends of a recorded run
    for command in ("rollouts", "trends"):
        here = run_cli_here(command, "--db", bundled_template, "--run", "kl-0.2", "--json")
        there = run_cli_here(command, "--db", db, "--run", "kl-0.2", "--json")
        assert there.returncode == 0, there.stderr
        assert json.loads(there.stdout) == json.loads(here.stdout)
