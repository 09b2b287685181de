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

import pyarrow as pa
import pyarrow.parquet as pq

from backend.errors import InputError
from backend.ingest import token_dumps
from backend.ingest.sources import detect_format, trl_files, verl_files
from backend.ingest.step_files import native_files

READS = {
    "native": "one JSONL or Parquet file of native records (prompt, response, rewards), or a folder of "
              "native Parquet step files",
    "verl": "JSONL verl rollout dumps (<step>.jsonl with input, output, score)",
    "trl": "Parquet TRL completion logs (completions_*.parquet)",
    "nemo-rl": "JSONL NeMo-RL dumps (train_data_step<N>.jsonl)",
    "prime-rl": "JSONL prime-rl token exports (token_exports/step_<N>/rank_<R>.jsonl)",
    "rl-logging-board": "JSONL RL Logging Board files (prompt, response, response_tokens, reward, step)",
}
CONTAINERS = {"native": ("JSONL", "Parquet"), "trl": ("Parquet",)}  # every other format: JSONL only
NAMES = {
    "native": "native Credit Lens run",
    "verl": "verl rollout dump",
    "trl": "TRL completions log",
    "nemo-rl": "NeMo-RL train_data dump",
    "prime-rl": "prime-rl token export",
    "rl-logging-board": "RL Logging Board log",
}
FILES = {"verl": verl_files, "trl": trl_files, "native": native_files, **token_dumps.FILES}


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
        except (pa.ArrowInvalid, OSError):
            return None
        return "trl" if "completion" in names else "native" if "response" in names else None
    if kind != "JSONL":
        return None
    first = token_dumps._first_record(path)
    found = token_dumps.record_format(first)
    if found is not None or not isinstance(first, dict):
        return found
    if "input" in first and "output" in first:
        return "verl"
    if "prompt" in first and "response" in first and "rewards" in first:
        return "native"
    return None


def _directory_holds(path: Path) -> str | None:
    found = token_dumps.detect_token_dump(path)
    if found is None:
        try:
            found = detect_format(path)
        except InputError:
            return None
    return found


def check_format(path: Path, fmt: str) -> None:
    """Raise `InputError` saying what `path` is when `fmt` (given explicitly) cannot read it."""
    if path.is_dir():
        holds = _directory_holds(path)
        hint = f"; it holds a {NAMES[holds]}: use --format {holds}" if holds and holds != fmt else ""
        files = FILES[fmt](path)
        if fmt == "native" and not files:
            raise InputError(f"{path}: this is a directory; --format native reads {READS['native']}{hint}")
        if not files:
            raise InputError(f"{path}: this directory has no files that --format {fmt} reads "
                             f"({READS[fmt]}){hint}")
        path = files[0]
    kind = file_kind(path)
    accepted = CONTAINERS.get(fmt, ("JSONL",))
    holds = content_format(path, kind)
    what = {"empty": "an empty file", "JSON": "a JSON file (one document, not one record per line)"}.get(
        kind, f"a {kind} file") + (f" ({NAMES[holds]})" if holds else "")
    readable = kind in accepted or (kind in ("empty", "text") and "JSONL" in accepted)
    if not readable:
        raise InputError(f"{path}: this is {what}; --format {fmt} reads {READS[fmt]}")
    if holds is not None and holds != fmt:
        raise InputError(f"{path}: this is {what}; --format {fmt} reads {READS[fmt]}; use --format {holds}")
