"""Native JSONL with token ids read line by line into Arrow columns: the blocks of lines that the pyarrow
path (`arrow_jsonl`) leaves, a chunk of lines at a time.

Each line is parsed with orjson (measured on the `bench scale` records: 5x faster than `json.loads`),
its record key is computed exactly as the per-record reader does (`canonical.canonical_json`), and the
chunk's records become one Arrow record batch that `fast_parquet.convert_batch` validates and converts.
A chunk this path cannot take as a whole (a record without token ids, a field of an unexpected type,
anything `convert_batch` rejects) goes through `validate_record` record by record, so its errors are
word for word the per-record reader's, with the line number. Lines orjson refuses (NaN, unpaired
surrogates, integers past 64 bits, bad UTF-8, malformed JSON) are parsed as the per-record reader does.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from backend.core.errors import InputError
from backend.ingest import fast_parquet
from backend.ingest import native_rules as rules
from backend.ingest.canonical import canonical_json, record_key_of_text
from backend.ingest.records import ChunkBuffer, validate_record
from backend.ingest.sources import record_key
from backend.ingest.tokenize import Tokenizer

# The field rules' kinds (`native_rules`) say which fields become which Arrow columns.
_STRUCTS = rules.of_kind(rules.SCORES, rules.PER_TOKEN_MAP)
_INT_LISTS = rules.of_kind(rules.IDS)
_PER_TOKEN = rules.of_kind(rules.PER_TOKEN)
_OPTIONAL = (*rules.of_kind(rules.GROUP), *_INT_LISTS, *_PER_TOKEN, *_STRUCTS)
"""Fields taken as Arrow infers them (besides prompt, response, step and tokens, built explicitly)."""
_AGENT = rules.PER_RECORD_ONLY
"""An agent's loss mask, turns and turn rewards, logprobs_after (read by the per-record reader)."""


@dataclass
class Line:
    where: str
    record: object
    key: int | None
    literals: bool
    """The line has a `true` or `false` somewhere: Arrow would read one among numbers as 1 or 0."""


@dataclass
class Parsed:
    """What one pass over the file found so far: the lines of the current chunk and its token count."""

    lines: list[Line] = field(default_factory=list)
    tokens: int = 0


def parse_line(raw: bytes, where: str, name: str, index: int) -> tuple[object, int | None] | None:
    """(record, key) of one line, None for a blank one; errors as `sources.iter_jsonl` words them."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        pass
    else:
        if not isinstance(obj, dict):
            return obj, None
        text = canonical_json(obj)
        # orjson reads an integer past 64 bits as a float (json keeps it an integer), and such a float
        # (>= 9.2e18) is written with "e+": a line whose text has one is parsed again by json.
        if "e+" not in text:
            return obj, record_key_of_text(name, index, text)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"{where}: not valid UTF-8 (byte {exc.start})") from None
    if not text.strip():
        return None
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, ValueError) as exc:
        raise InputError(f"{where}: malformed JSON ({str(exc).splitlines()[0]})") from None
    except RecursionError:
        raise InputError(f"{where}: malformed JSON (nested too deeply)") from None
    return obj, (record_key(name, index, obj) if isinstance(obj, dict) else None)


def iter_chunks(
    lines: Iterable[tuple[int, bytes]],
    path: Path,
    first_index: int,
    progress: Callable[[int], None] | None,
    max_records: int,
    max_tokens: int,
) -> Iterator[list[Line]]:
    """`lines` ((line number, bytes) of the file, from record number `first_index` on), parsed and keyed,
    without the blank ones, in chunks of at most `max_records` records or about `max_tokens` tokens. A line
    that does not parse ends the iteration with its error only after the lines before it were yielded (the
    per-record reader names the first bad line of the file)."""
    chunk = Parsed()
    index = first_index
    for lineno, raw in lines:
        if progress:
            progress(len(raw))
        if not raw.strip():
            continue
        where = f"{path}: line {lineno}"
        try:
            parsed = parse_line(raw, where, path.name, index)
        except InputError:
            if chunk.lines:
                yield chunk.lines
            raise
        if parsed is None:
            continue
        obj, key = parsed
        index += 1
        chunk.lines.append(Line(where, obj, key, b"true" in raw or b"false" in raw))
        ids = obj.get("token_ids") if isinstance(obj, dict) else None
        chunk.tokens += len(ids) if isinstance(ids, list) else 0
        if len(chunk.lines) >= max_records or chunk.tokens >= max_tokens:
            yield chunk.lines
            chunk = Parsed()
    if chunk.lines:
        yield chunk.lines


def _labels(token_ids: pa.ListArray, tokenizer: Tokenizer, records: list[dict]) -> pa.Array:
    """The `tokens` column: the records' own where given, else the tokenizer's display text."""
    if tokenizer.hf is None and all(r.get("tokens") is None for r in records):
        flat = token_ids.flatten().cast(pa.string())
        labels = pc.binary_join_element_wise("<", flat, ">", "")  # Tokenizer.display without a model
        return pa.ListArray.from_arrays(token_ids.offsets, labels)
    return pa.array(
        [r["tokens"] if r.get("tokens") is not None else tokenizer.display(r["token_ids"]) for r in records],
        pa.list_(pa.string()),
    )


def _meta(record: dict) -> tuple[str, str | None]:
    """(meta as stored, ground truth) as `validate_record` and `ChunkBuffer` make them."""
    meta = record.get("meta", {})
    meta = {} if meta is None else meta
    if not isinstance(meta, dict):
        raise fast_parquet.Unsupported
    truth = record.get("ground_truth", meta.get("ground_truth"))
    if truth is not None and not isinstance(truth, str):
        truth = json.dumps(truth)
    return json.dumps(meta, default=str, ensure_ascii=False), truth


def _has_bool(value: object) -> bool:
    if isinstance(value, bool):
        return True
    if isinstance(value, list):
        return any(_has_bool(x) for x in value)
    if isinstance(value, dict):
        return any(_has_bool(x) for x in value.values())
    return False


_FLOATS = pa.list_(pa.float64())


def _arrow_type(name: str, records: list[dict]) -> pa.DataType | None:
    """The column type of a field whose values are numbers (10x faster than Arrow's inference); None
    (inferred) for ids and groups, where an explicit int64 would take 1.0 as 1 and the per-record reader
    does not. An explicit float64 would take a boolean as 1.0: `to_batch` has ruled them out."""
    if name in _PER_TOKEN:
        return _FLOATS
    if name in _STRUCTS:
        channels = dict.fromkeys(k for r in records if isinstance(r.get(name), dict) for k in r[name])
        return pa.struct([(k, pa.float64() if name == "rewards" else _FLOATS) for k in channels])
    return None


def to_batch(lines: list[Line], tokenizer: Tokenizer) -> tuple[pa.RecordBatch, pa.Array]:
    """One record batch of the lines' records (and their stored meta column), or `Unsupported`."""
    records = [line.record for line in lines]
    for line, r in zip(lines, records, strict=True):
        if not isinstance(r, dict) or r.get("token_ids") is None or "record_key" in r:
            raise fast_parquet.Unsupported
        if "metrics" in r or not _AGENT.isdisjoint(r):  # the per-record reader validates these
            raise fast_parquet.Unsupported
        if r.get("logged_advantage") is not None:
            raise fast_parquet.Unsupported
        if line.literals and any(_has_bool(r.get(name)) for name in ("step", *_OPTIONAL)):
            raise fast_parquet.Unsupported
    present = {name for r in records for name in r}
    try:
        columns = {
            name: pa.array([r.get(name) for r in records], pa.string()) for name in ("prompt", "response")
        }
        columns["step"] = pa.array([r.get("step", 0) for r in records])
        for name in _OPTIONAL:
            if name in present:
                columns[name] = pa.array([r.get(name) for r in records], _arrow_type(name, records))
        for name in _INT_LISTS:  # a null inside a list of ids is an error the per-record reader words
            ids = columns.get(name)
            if ids is not None and pa.types.is_list(ids.type) and ids.flatten().null_count:
                raise fast_parquet.Unsupported
        if not pa.types.is_list(columns["token_ids"].type):
            raise fast_parquet.Unsupported
        if "tokens" in present:
            tokens = pa.array([r.get("tokens") for r in records])
            if not pa.types.is_list(tokens.type) or tokens.flatten().null_count:
                raise fast_parquet.Unsupported
        columns["tokens"] = _labels(columns["token_ids"], tokenizer, records)
        metas, truths = zip(*(_meta(r) for r in records), strict=True)
        columns["ground_truth"] = pa.array(truths, pa.string())
        meta = pa.array(metas, pa.string())
    except (
        pa.ArrowInvalid,
        pa.ArrowTypeError,
        pa.ArrowNotImplementedError,
        OverflowError,
        TypeError,
        UnicodeEncodeError,
    ):
        raise fast_parquet.Unsupported from None
    return pa.RecordBatch.from_pydict(columns), meta


def convert_batch(
    batch: pa.RecordBatch, meta: pa.Array, keys: np.ndarray, buffer: ChunkBuffer, path: Path
) -> dict[str, pa.Table] | None:
    """The store tables of a batch of native JSONL records (`fast_parquet.convert_batch` and the stored
    meta column), or None, with `buffer` as it was, where the batch needs the record-by-record reader."""
    next_id, n_groups = buffer.next_rollout_id, len(buffer.new_groups)
    try:
        tables = fast_parquet.convert_batch(batch, buffer, path, 0, keys)
    except (fast_parquet.Unsupported, InputError):
        for group in buffer.new_groups[n_groups:]:  # undo what convert_batch began
            del buffer.group_keys[group["group_key"]]
        del buffer.new_groups[n_groups:]
        buffer.next_rollout_id = next_id
        return None
    tables["rollouts"] = tables["rollouts"].append_column("meta", meta)
    return tables


def convert_chunk(
    lines: list[Line], buffer: ChunkBuffer, path: Path, tokenizer: Tokenizer
) -> tuple[dict[str, pa.Table], str]:
    """The store tables of a chunk of lines and its tokenization: vectorized when the chunk allows it,
    else record by record (see the module docstring). `buffer` is left as the chosen path leaves it."""
    try:
        batch, metas = to_batch(lines, tokenizer)
    except fast_parquet.Unsupported:
        tables = None
    else:
        keys = pa.array([line.key for line in lines], pa.int64()).to_numpy()
        tables = convert_batch(batch, metas, keys, buffer, path)
    if tables is not None:
        return tables, "ids"
    tokenization = "ids"
    for line in lines:
        raw = line.record
        if isinstance(raw, dict) and "record_key" not in raw:
            raw = {**raw, "record_key": line.key}
        rec = validate_record(raw, line.where, tokenizer)
        if rec["tokenized"] != "ids":
            tokenization = rec["tokenized"]
        buffer.add(rec)
    return buffer.flush(), tokenization
