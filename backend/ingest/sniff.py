"""What a path holds, in words, so that an explicit `--format` that cannot read it fails clearly.

`check_format(path, fmt)` runs before anything is written. It looks at the container (Parquet by
its magic bytes, JSON lines by the first line) and at the first record's fields, and when they do
not fit `fmt` it says what the file is: "this is a Parquet file (TRL completions log); --format
verl reads JSONL verl rollout dumps". A file whose first record fits no known format is left to the
format's reader, which names the line and field that is wrong.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq

from backend.core.errors import InputError
from backend.ingest import formats
from backend.ingest.sources import PARQUET_ERRORS, first_record


def file_kind(path: Path) -> str:
    """Parquet | JSONL | JSON (one document over several lines) | empty | binary | text."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(1 << 16)
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    if head.startswith(b"PAR1"):
        return "Parquet"
    if not head.strip():
        return "empty"
    for candidate, kind in ((head.lstrip().split(b"\n", 1)[0], "JSONL"), (head, "JSON")):
        try:
            json.loads(candidate)
            return kind
        except (ValueError, RecursionError):
            pass
    # Mostly undecodable: a binary file (gzip, an image). A few bad bytes in a JSONL file are left to
    # its reader, which names the line.
    if head.decode("utf-8", errors="replace").count("\ufffd") > len(head) * 0.3:
        return "binary"
    return "text"  # e.g. a JSONL file whose first line is broken: its reader names the line


def content_format(path: Path, kind: str) -> str | None:
    """The format whose records the file holds, judged by the first record; None when unsure."""
    if kind == "Parquet":
        try:
            names = pq.read_schema(path).names
        except PARQUET_ERRORS:
            return None
        return _first_match(lambda spec: spec.columns is not None and spec.columns(names))
    if kind != "JSONL":
        return None
    first = first_record(path)
    return _first_match(lambda spec: spec.record is not None and spec.record(first))


def _first_match(fits) -> str | None:
    return next((spec.name for spec in formats.in_detection_order() if fits(spec)), None)


def _directory_holds(path: Path) -> str | None:
    try:
        return formats.detect(path).name
    except InputError:
        return None


def check_format(path: Path, fmt: str) -> None:
    """Raise `InputError` saying what `path` is when `fmt` (given explicitly) cannot read it."""
    spec = formats.get(fmt, path)
    if path.is_dir():
        path = _first_file(path, spec)
    kind = file_kind(path)
    holds = content_format(path, kind)
    what = {"empty": "an empty file", "JSON": "a JSON file (one document, not one record per line)"}.get(
        kind, f"a {kind} file"
    ) + (f" ({formats.get(holds).title})" if holds else "")
    readable = kind in spec.containers or (kind in ("empty", "text") and "JSONL" in spec.containers)
    if not readable:
        raise InputError(f"{path}: this is {what}; --format {fmt} reads {spec.reads}")
    if holds is not None and holds != fmt:
        raise InputError(f"{path}: this is {what}; --format {fmt} reads {spec.reads}; use --format {holds}")


def _first_file(path: Path, spec: formats.FormatSpec) -> Path:
    """The first file of a folder that `spec` reads; none: say what the folder holds instead."""
    holds = _directory_holds(path)
    hint = ""
    if holds is not None and holds != spec.name:
        hint = f"; it holds a {formats.get(holds).title}: use --format {holds}"
    files = spec.files(path)
    if spec.name == "native" and not files:
        raise InputError(f"{path}: this is a directory; --format native reads {spec.reads}{hint}")
    if not files:
        raise InputError(
            f"{path}: this directory has no files that --format {spec.name} reads ({spec.reads}){hint}"
        )
    return files[0]
