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

from backend.core.errors import InputError
from backend.ingest import arrow_jsonl, fast_jsonl, fast_parquet
from backend.ingest.records import ChunkBuffer, validate_record
from backend.ingest.sources import read_batches, record_key
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
) -> tuple[int, int, str, int]:
    """Native JSONL a block of lines at a time: parsed by pyarrow where the block allows it (`arrow_jsonl`),
    else line by line (`fast_jsonl`); records already in the run are skipped. Each chunk is stored before the
    next is read: a writer thread one chunk behind was tried and taken out (docs/benchmarks.md)."""
    first_id = buffer.next_rollout_id
    n_tokens = skipped = index = 0
    tokenization = "ids"
    for block, table in arrow_jsonl.read_ahead(path):
        staged = _stage_block(block, table, path, index, buffer, tokenizer, insert, seen)
        if staged is not None:
            n_tokens += staged[0]
            skipped += staged[1]
            index += len(block.starts)
            if bar is not None:
                bar(len(block.data))
            continue
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
    return buffer.next_rollout_id - first_id, n_tokens, tokenization, skipped


def _stage_block(
    block: arrow_jsonl.Block,
    table: Future,
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
        table, keys = arrow_jsonl.parse_block(block, path.name, index, table.result())
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
    name = file_hash or path.name
    return np.array([record_key(name, offset + i, "") for i in range(n)], dtype=np.int64)


def stage_parquet(
    path: Path,
    buffer: ChunkBuffer,
    tokenizer: Tokenizer,
    insert,
    bar,
    seen: set[int],
    file_hash: str | None,
    chunk_records: int,
) -> tuple[int, int, str, int]:
    try:
        reader = pq.ParquetFile(path, pre_buffer=False)  # pre-buffering keeps every batch read
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for corrupt files
        raise InputError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None
    offset = n_records = n_tokens = skipped = 0
    tokenization = "ids"
    for batch in read_batches(reader, path, chunk_records):
        keys = _parquet_keys(file_hash, path, offset, batch.num_rows)
        # Keys derive from the whole file's hash, so a batch is either entirely in the run or not at all.
        if any(k in seen for k in keys.tolist()):
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
