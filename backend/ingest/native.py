"""The staging loops of the vectorized native paths: Parquet files, JSONL files and Arrow record batches
built in memory (`creditlens synth`). Each converts a chunk to the store's tables and hands them to
`insert` (one committed transaction into the staging run, see `backend.ingest`); records whose key the
run already has are skipped. Each returns (records, tokens, tokenization, skipped)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import Future
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from backend.core import workers as work
from backend.core.errors import InputError
from backend.ingest import arrow_jsonl, fast_jsonl, fast_parquet, split_import
from backend.ingest.canonical import positional_keys
from backend.ingest.records import ChunkBuffer, validate_record
from backend.ingest.sources import read_batches
from backend.ingest.tokenize import Tokenizer


def _tokens(tables: dict[str, pa.Table]) -> int:
    return int(pc.sum(pc.list_value_length(tables["rollouts"].column("token_ids"))).as_py() or 0)


def stage_batches(
    batches: Iterable[pa.RecordBatch], buffer: ChunkBuffer, insert: Callable, origin: str, chunk_records: int
) -> tuple[int, int, str, int]:
    """Native-format record batches (no record keys: in-memory records have no file position)."""
    first_id = buffer.next_rollout_id
    offset = n_tokens = 0
    for batch in batches:
        for start in range(0, batch.num_rows, chunk_records):
            part = batch.slice(start, chunk_records)
            try:
                tables = fast_parquet.convert_batch(part, buffer, origin, offset)
            except fast_parquet.Unsupported:
                raise InputError(
                    f"{origin}: record {offset + 1} onwards: these columns need the per-record "
                    "path (token ids, and rewards as a struct, are required)"
                ) from None
            n_tokens += _tokens(tables)
            insert(tables)
            offset += part.num_rows
    return buffer.next_rollout_id - first_id, n_tokens, "ids", 0


def stage_jsonl(
    path: Path,
    buffer: ChunkBuffer,
    tokenizer: Tokenizer,
    insert,
    bar,
    seen: set[int],
    chunk_records: int,
    chunk_tokens: int,
    workers: work.Workers | None = None,
) -> tuple[int, int, str, int]:
    """Native JSONL a block of lines at a time: parsed by pyarrow where the block allows it (`arrow_jsonl`),
    else line by line (`fast_jsonl`); records already in the run are skipped. Each chunk is stored before the
    next is read: a writer thread one chunk behind was tried and taken out (docs/benchmarks.md). A file of
    several blocks is converted by `workers` (default: the command's; `split_import`)."""
    first_id = buffer.next_rollout_id
    split = workers or work.current()
    pieces = list(split_import.jsonl_pieces(path, tokenizer.model_dir)) if split != work.IN_PROCESS else []
    tokens = path.stat().st_size // 8  # a native JSONL token takes 8 bytes or more (an id and a comma, ...)
    count = split.for_job(len(pieces), tokens) if pieces else 1
    totals = [0, 0, "ids", 0]  # (records, tokens, tokenization, skipped); records: from the buffer
    index = 0
    if count <= 1 and split.ray is None:
        for block, table in arrow_jsonl.read_ahead(path):
            part, index = _jsonl_block(
                block, table, path, index, buffer, tokenizer, insert, bar, seen, chunk_records, chunk_tokens
            )
            totals = _add(totals, part)
        return buffer.next_rollout_id - first_id, totals[1], totals[2], totals[3]
    converted = work.ordered_map(split_import.convert_jsonl, pieces, split, count)
    for piece, done in zip(pieces, converted, strict=True):
        if index != piece.first_index or done.unsupported or _any_seen(done, seen):
            # the serial way (a block before it went line by line and counted its records otherwise)
            with open(path, "rb") as fh:
                fh.seek(piece.start)
                block = arrow_jsonl._block(fh.read(piece.size), piece.first_line)
            part, index = _jsonl_block(
                block, None, path, index, buffer, tokenizer, insert, bar, seen, chunk_records, chunk_tokens
            )
        else:
            part = _insert_converted(done, buffer, insert, seen)
            index += piece.records
            if bar is not None:
                bar(piece.size)
        totals = _add(totals, part)
    return buffer.next_rollout_id - first_id, totals[1], totals[2], totals[3]


def _jsonl_block(
    block: arrow_jsonl.Block,
    table: Future | None,
    path: Path,
    index: int,
    buffer: ChunkBuffer,
    tokenizer: Tokenizer,
    insert,
    bar,
    seen: set[int],
    chunk_records: int,
    chunk_tokens: int,
) -> tuple[tuple[int, int, str, int], int]:
    """One block staged here, its first record number `index`: ((0, tokens, tokenization, skipped), the next
    block's first record number)."""
    staged = _stage_block(block, table, path, index, buffer, tokenizer, insert, seen)
    if staged is not None:
        if bar is not None:
            bar(len(block.data))
        return (0, staged[0], "ids", staged[1]), index + len(block.starts)
    n_tokens = skipped = 0
    tokenization = "ids"
    lines = block.raw_lines()
    for chunk in fast_jsonl.iter_chunks(lines, path, index, bar, chunk_records, chunk_tokens):
        index += len(chunk)
        fresh = []
        for line in chunk:
            if line.key is not None and line.key in seen:
                skipped += 1
                continue
            if line.key is not None:
                seen.add(line.key)
            fresh.append(line)
        if not fresh:
            continue
        tables, how = fast_jsonl.convert_chunk(fresh, buffer, path, tokenizer)
        tokenization = how if how != "ids" else tokenization
        n_tokens += _tokens(tables)
        insert(tables)
    return (0, n_tokens, tokenization, skipped), index


def _stage_block(
    block: arrow_jsonl.Block,
    table: Future | None,
    path: Path,
    index: int,
    buffer: ChunkBuffer,
    tokenizer: Tokenizer,
    insert,
    seen: set[int],
) -> tuple[int, int] | None:
    """(tokens, skipped) of a block the pyarrow path took (its records from number `index` on; `table`: its
    `read_table`), or None, with nothing staged, for one the line-by-line path must read."""
    try:
        table, keys = arrow_jsonl.parse_block(
            block, path.name, index, None if table is None else table.result()
        )
    except fast_parquet.Unsupported:
        return None
    fresh = np.array([key not in seen for key in keys.tolist()], dtype=bool)
    if not fresh.all():
        table, keys = table.filter(pa.array(fresh)).combine_chunks(), keys[fresh]
    if not len(keys):
        return 0, len(fresh)
    batch, meta = arrow_jsonl.to_batch(table, tokenizer)
    tables = fast_jsonl.convert_batch(batch, meta, keys, buffer, path)
    if tables is None:
        return None
    seen.update(keys.tolist())
    insert(tables)
    return _tokens(tables), int(len(fresh) - len(keys))


def _parquet_keys(file_hash: str | None, path: Path, offset: int, n: int) -> np.ndarray:
    """Record keys of rows offset..offset+n of a native Parquet file: its content hash and row number
    (the per-record content is the file's; hashing each row's columns would cost the fast path)."""
    return positional_keys(file_hash or path.name, offset, n)


def stage_parquet(
    path: Path,
    buffer: ChunkBuffer,
    tokenizer: Tokenizer,
    insert,
    bar,
    seen: set[int],
    file_hash: str | None,
    chunk_records: int,
    workers: work.Workers | None = None,
    chunk_tokens: int | None = None,
) -> tuple[int, int, str, int]:
    """A native Parquet file; its pieces converted by `workers` (default: the command's) when the file is big
    enough to split (`split_import`), else here batch by batch. A chunk is `chunk_records` records, more for
    short rollouts (`chunk_rows`)."""
    try:
        reader = pq.ParquetFile(path, pre_buffer=False)  # pre-buffering keeps every batch read
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for corrupt files
        raise InputError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    chunk_records = chunk_rows(reader, chunk_records, chunk_tokens)
    split = workers or work.current()
    pieces = split_import.parquet_pieces(reader, path, file_hash, chunk_records)
    count = split.for_job(len(pieces), split_import.parquet_tokens(reader))
    if count <= 1 and split.ray is None:
        return _parquet_batches(
            read_batches(reader, path, chunk_records),
            0,
            path,
            buffer,
            tokenizer,
            insert,
            bar,
            seen,
            file_hash,
        )
    totals = [0, 0, "ids", 0]
    converted = work.ordered_map(split_import.convert_parquet, pieces, split, count)
    for piece, done in zip(pieces, converted, strict=True):
        if done.unsupported or _any_seen(done, seen):  # the serial way: its fallbacks, its skips
            batches = read_batches(reader, path, chunk_records, list(piece.row_groups), piece.offset)
            part = _parquet_batches(
                batches, piece.offset, path, buffer, tokenizer, insert, bar, seen, file_hash
            )
        else:
            part = _insert_converted(done, buffer, insert, seen)
            if bar is not None:
                bar(piece.rows)
        totals = _add(totals, part)
    return tuple(totals)


# A chunk of short rollouts grows to this many times `chunk_records`, at most.
MOST_RECORDS_FACTOR = 16


def chunk_rows(reader: pq.ParquetFile, chunk_records: int, chunk_tokens: int | None) -> int:
    """Records per chunk of a Parquet file: `chunk_records`, or, for rollouts shorter on average than
    `chunk_tokens / chunk_records` tokens, as many as make `chunk_tokens` tokens at the file's mean length
    (from its footer), up to `MOST_RECORDS_FACTOR` times more. Each chunk is one commit, whose cost hardly
    depends on its rows: 307k rollouts of ~40 tokens paid it 150 times, 7 of their 15 s of import
    (docs/benchmarks.md); the token bound keeps a chunk's memory where long rollouts have it."""
    tokens = split_import.parquet_tokens(reader)
    rows = reader.metadata.num_rows
    if not chunk_tokens or not tokens or not rows:
        return chunk_records
    return int(min(MOST_RECORDS_FACTOR * chunk_records, max(chunk_records, chunk_tokens * rows // tokens)))


def _any_seen(done: split_import.Converted, seen: set[int]) -> bool:
    return bool(seen) and any(
        k in seen for tables in done.parts for k in tables["rollouts"].column("record_key").to_pylist()
    )


def _insert_converted(
    done: split_import.Converted, buffer: ChunkBuffer, insert, seen: set[int]
) -> tuple[int, int, str, int]:
    """A worker's converted piece, numbered as the run's and inserted in one commit; its keys join `seen`."""
    parts = split_import.renumbered(done, buffer)
    tables = {
        name: pa.concat_tables([p[name] for p in parts if name in p])
        for name in {n for p in parts for n in p}
    }
    if "rollouts" in tables:
        seen.update(tables["rollouts"].column("record_key").to_pylist())
        insert(tables)
    return done.rollouts, done.tokens, "ids", 0


def _add(totals: list, part: tuple[int, int, str, int]) -> list:
    return [
        totals[0] + part[0],
        totals[1] + part[1],
        part[2] if part[2] != "ids" else totals[2],
        totals[3] + part[3],
    ]


def _parquet_batches(
    batches: Iterable[pa.RecordBatch],
    offset: int,
    path: Path,
    buffer: ChunkBuffer,
    tokenizer: Tokenizer,
    insert,
    bar,
    seen: set[int],
    file_hash: str | None,
) -> tuple[int, int, str, int]:
    """Parquet record batches (the first is record number `offset`) staged one by one, here."""
    n_records = n_tokens = skipped = 0
    tokenization = "ids"
    for batch in batches:
        keys = _parquet_keys(file_hash, path, offset, batch.num_rows)
        # Keys derive from the whole file's hash, so a batch is either entirely in the run or not at all.
        if seen and any(k in seen for k in keys.tolist()):
            skipped += batch.num_rows
            offset += batch.num_rows
            if bar is not None:
                bar(batch.num_rows)
            continue
        seen.update(keys.tolist())
        try:
            tables = fast_parquet.convert_batch(batch, buffer, path, offset, keys)
            n_tokens += _tokens(tables)
            insert(tables)
        except fast_parquet.Unsupported:
            for k, raw in enumerate(batch.to_pylist()):
                raw["record_key"] = int(keys[k])
                rec = validate_record(raw, f"{path}: record {offset + k + 1}", tokenizer)
                if rec["tokenized"] != "ids":
                    tokenization = rec["tokenized"]
                n_tokens += len(rec["token_ids"])
                buffer.add(rec)
            insert(buffer.flush())
        offset += batch.num_rows
        n_records += batch.num_rows
        if bar is not None:
            bar(batch.num_rows)
    return n_records, n_tokens, tokenization, skipped
