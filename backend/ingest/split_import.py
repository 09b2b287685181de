"""A native import split over workers (`backend.core.workers`): each worker reads, validates and converts
a piece of the file (Parquet row groups, or a block of JSONL lines it reads from the file itself), and the
importing process, the one writer, numbers the rows and commits them, piece after piece, in file order.

A worker converts its piece into the store's tables with ids of its own: rollouts 0..n-1, groups in the
order it first met them (`Converted.groups`). The writer turns them into the run's: rollout ids shifted by
the rollouts before the piece, each of the piece's groups looked up (or created) in the import's
`ChunkBuffer` once, in that order. So a group gets the id it gets in one process (first met in file order),
and the tables hold the same rows. Only an import into a run without records takes this path: record keys
the run already holds would have to be skipped before ids are given (`native`'s serial loops do that).

A piece the vectorized path does not take (`fast_parquet.Unsupported`, a JSONL block pyarrow does not
prove) comes back unconverted and the writer reads it the serial way, with that way's errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from backend.core.errors import InputError
from backend.ingest import arrow_jsonl, fast_jsonl, fast_parquet
from backend.ingest.canonical import positional_keys
from backend.ingest.records import ChunkBuffer
from backend.ingest.sources import PARQUET_ERRORS, read_batches
from backend.ingest.tokenize import Tokenizer

PIECE_ROWS = 4096
"""Parquet rows a worker converts at once (whole row groups, at least this many unless the file ends)."""
ID_TABLES = ("rollouts", "scores", "token_rewards", "token_features", "rollout_metrics")


@dataclass(frozen=True)
class ParquetPiece:
    """Row groups `row_groups` of a native Parquet file, its records `offset`.. (0-based)."""

    path: str
    row_groups: tuple[int, ...]
    offset: int
    rows: int
    file_hash: str | None
    chunk_records: int


@dataclass(frozen=True)
class JsonlPiece:
    """Bytes `start`..`start + size` of a native JSONL file: whole lines from line `first_line` (1-based),
    the first non-blank one its record `first_index` (0-based)."""

    path: str
    start: int
    size: int
    first_line: int
    first_index: int
    records: int
    model_dir: str | None


@dataclass
class Converted:
    """A worker's piece: `parts` (store tables with the piece's own ids, in order), the piece's groups as
    (key, step, prompt, ground truth) in the order of their ids 0.., its rollouts, and whether the serial
    path must read it instead (`unsupported`)."""

    parts: list[dict[str, pa.Table]] = field(default_factory=list)
    groups: list[tuple] = field(default_factory=list)
    rollouts: int = 0
    tokens: int = 0
    unsupported: bool = False


def parquet_pieces(
    reader: pq.ParquetFile, path: Path, file_hash: str | None, chunk_records: int
) -> list[ParquetPiece]:
    """The file's row groups in pieces of about `PIECE_ROWS` rows (whole row groups)."""
    pieces, groups, rows, offset = [], [], 0, 0
    for i in range(reader.metadata.num_row_groups):
        groups.append(i)
        rows += reader.metadata.row_group(i).num_rows
        if rows >= PIECE_ROWS:
            pieces.append(ParquetPiece(str(path), tuple(groups), offset, rows, file_hash, chunk_records))
            offset, groups, rows = offset + rows, [], 0
    if groups:
        pieces.append(ParquetPiece(str(path), tuple(groups), offset, rows, file_hash, chunk_records))
    return pieces


def parquet_tokens(reader: pq.ParquetFile) -> int | None:
    """The file's tokens from its footer (the values of `token_ids`' leaf column); None without it."""
    meta = reader.metadata
    leaf = [i for i in range(meta.num_columns) if meta.schema.column(i).path.startswith("token_ids.")]
    if not leaf:
        return None
    return sum(meta.row_group(g).column(leaf[0]).num_values for g in range(meta.num_row_groups))


_EMPTY_LINE = re.compile(rb"\n(?=\n)")


def jsonl_pieces(path: Path, model_dir: str | None) -> Iterator[JsonlPiece]:
    """The file's blocks of whole lines (as `arrow_jsonl.iter_blocks` cuts them, `arrow_jsonl.BLOCK_BYTES`
    each), each with the number of its first line and first record; newlines are counted in C."""
    first_line, first_index, start = 1, 0, 0
    for data in arrow_jsonl.iter_block_bytes(path, arrow_jsonl.BLOCK_BYTES):
        # a record per non-empty line; an empty line is a newline at a line's start
        empty = (data[:1] == b"\n") + len(_EMPTY_LINE.findall(data))
        newlines = data.count(b"\n")
        records = newlines + (not data.endswith(b"\n")) - empty
        yield JsonlPiece(str(path), start, len(data), first_line, first_index, records, model_dir)
        first_line += newlines
        first_index += records
        start += len(data)


def convert_parquet(piece: ParquetPiece) -> Converted:
    """A worker's Parquet piece (module level: worker processes and Ray tasks find it by name)."""
    path = Path(piece.path)
    try:
        reader = pq.ParquetFile(path, pre_buffer=False)
    except PARQUET_ERRORS as exc:
        raise InputError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    scratch = ChunkBuffer(0, 0, {})
    out, offset = Converted(), piece.offset
    for batch in read_batches(reader, path, piece.chunk_records, list(piece.row_groups), piece.offset):
        keys = positional_keys(piece.file_hash or path.name, offset, batch.num_rows)
        try:
            tables = fast_parquet.convert_batch(batch, scratch, path, offset, keys)
        except fast_parquet.Unsupported:
            return Converted(unsupported=True)
        out.parts.append(tables)
        offset += batch.num_rows
    return _finished(out, scratch)


_TOKENIZERS: dict[str | None, Tokenizer] = {}


def convert_jsonl(piece: JsonlPiece) -> Converted:
    """A worker's JSONL block, through pyarrow's reader (`arrow_jsonl`), or `unsupported`."""
    path = Path(piece.path)
    with open(path, "rb") as fh:
        fh.seek(piece.start)
        data = fh.read(piece.size)
    block = arrow_jsonl._block(data, piece.first_line)
    try:
        table, keys = arrow_jsonl.parse_block(block, path.name, piece.first_index)
    except fast_parquet.Unsupported:
        return Converted(unsupported=True)
    if piece.model_dir not in _TOKENIZERS:
        _TOKENIZERS[piece.model_dir] = Tokenizer(piece.model_dir)
    batch, meta = arrow_jsonl.to_batch(table, _TOKENIZERS[piece.model_dir])
    scratch = ChunkBuffer(0, 0, {})
    tables = fast_jsonl.convert_batch(batch, meta, keys, scratch, path)
    if tables is None:
        return Converted(unsupported=True)
    return _finished(Converted(parts=[tables]), scratch)


def _finished(out: Converted, scratch: ChunkBuffer) -> Converted:
    rows = {}
    for tables in out.parts:
        groups = tables.pop("groups")
        for g in groups.to_pylist():
            rows[g["group_id"]] = (g["group_key"], g["step"], g["prompt"], g["ground_truth"])
    out.groups = [rows[i] for i in range(len(rows))]
    out.rollouts = scratch.next_rollout_id
    out.tokens = sum(
        int(pc.sum(pc.list_value_length(t["rollouts"].column("token_ids"))).as_py() or 0) for t in out.parts
    )
    return out


def renumbered(converted: Converted, buffer: ChunkBuffer) -> list[dict[str, pa.Table]]:
    """The piece's tables with the run's ids (the module docstring); `buffer` moves on past the piece."""
    base = buffer.next_rollout_id
    group_map = np.array([buffer.group_id(*g) for g in converted.groups], dtype=np.int32)
    buffer.next_rollout_id += converted.rollouts
    out = []
    for k, tables in enumerate(converted.parts):
        fixed = {}
        for name, table in tables.items():
            table = _set(table, "run_id", pa.array(np.full(table.num_rows, buffer.run_id, np.int32)))
            if name in ID_TABLES:
                ids = table.column("rollout_id").to_numpy() + base
                table = _set(table, "rollout_id", pa.array(ids.astype(np.int32)))
            if name == "rollouts":
                groups = group_map[table.column("group_id").to_numpy()]
                table = _set(table, "group_id", pa.array(groups))
            fixed[name] = table
        if k == len(converted.parts) - 1:
            fixed["groups"] = buffer.flush_groups()
        out.append(fixed)
    return out


def _set(table: pa.Table, name: str, column: pa.Array) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(name), column.cast(table.schema.field(name).type))
