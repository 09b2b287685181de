"""Folders of native step files: Parquet, as trainer recorders write them (`creditlens.integrations.trl`),
or JSONL (`step_0000.jsonl`, ...), as a training loop of one's own may; their names and their listing in
step order, for `import DIR` and `import --follow DIR`."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq

from backend.ingest.sources import PARQUET_ERRORS, first_record

STEP_FILE = "step_{step:06d}{part}.parquet"
"""The name of a step's file; `part` is "" or "-<k>" for a step's k-th further generation."""


def step_file_name(step: int, part: int = 0, rank: int | None = None) -> str:
    """`step_000012.parquet`; `-<part>` for further generations of one step; `rank03_` per process."""
    name = STEP_FILE.format(step=step, part=f"-{part}" if part else "")
    return name if rank is None else f"rank{rank:02d}_{name}"


def _step_key(path: Path) -> tuple[int, int, str]:
    """(step, part, name): the number after `step_`, then the one after `-`; other names sort by name."""
    found = re.search(r"step_(\d+)(?:-(\d+))?", path.stem)
    return (int(found.group(1)), int(found.group(2) or 0), path.name) if found else (-1, 0, path.name)


def native_files(path: Path) -> list[Path]:
    """A file: itself. A folder: its `*.parquet` files in step order, when the first holds native records
    (a `response` column); a folder without Parquet files: its `*.jsonl` files in step order, when the first
    record of the first is native (a `response`, not verl's `input` and `output`); else none. Temporary
    files (`.step_….parquet.tmp`) never match."""
    if path.is_file():
        return [path]
    found = _in_step_order(path, "*.parquet")
    if found:
        try:
            return found if "response" in pq.read_schema(found[0]).names else []
        except PARQUET_ERRORS:
            return []
    found = _in_step_order(path, "*.jsonl")
    return found if found and is_native_jsonl_record(first_record(found[0])) else []


def is_native_jsonl_record(obj: object) -> bool:
    """A JSONL record that reads as native: it has a `response`, and is not verl's (`input` and `output`).
    A folder of such files was once read as a verl dump and refused; a missing `prompt` or `rewards` is
    reported by the native importer, with its line."""
    return isinstance(obj, dict) and "response" in obj and not ("input" in obj and "output" in obj)


def _in_step_order(folder: Path, pattern: str) -> list[Path]:
    return sorted((p for p in folder.glob(pattern) if p.is_file()), key=_step_key)
