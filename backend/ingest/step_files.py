"""Folders of native Parquet step files, as trainer recorders write them (`creditlens.integrations.trl`):
their names and their listing in step order, for `import DIR` and `import --follow DIR`."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow.parquet as pq

from backend.ingest.sources import PARQUET_ERRORS

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
    (a `response` column), else none. Temporary files (`.step_….parquet.tmp`) never match."""
    if path.is_file():
        return [path]
    found = sorted((p for p in path.glob("*.parquet") if p.is_file()), key=_step_key)
    try:
        return found if found and "response" in pq.read_schema(found[0]).names else []
    except PARQUET_ERRORS:
        return []
