"""Native JSONL parsed by pyarrow's JSON reader a block of lines at a time (the large-run path).

A record's key (`sources.record_key`) hashes its canonical text, `json.dumps(record, sort_keys=True,
ensure_ascii=False)`, which pyarrow does not give. It is rebuilt here from the parsed columns without a
python object per token: each numeric list is formatted by orjson from its numpy values (the digits of
python's `repr`; the numbers it writes otherwise are rewritten, `canonical.python_numbers`), strings and
scalars by `json.dumps` per record. The rebuilt text is a proof as well as a key: the same members joined
in the line's own field order must give the line back byte for byte. That holds for lines `json.dumps`
wrote (what large runs are written with), and it shows that pyarrow read what python reads: the same
fields, numbers of the same kind (a `1` in a list of floats would come back `1.0`), no null standing for
an absent field, no duplicate key. A block with a line that is not proven, or with a field this path does
not take (`FIELDS`), raises `Unsupported`: `native.stage_jsonl` then reads it line by line
(`fast_jsonl`), whose errors name the file, the line and the field.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from backend.ingest import native_rules as rules
from backend.ingest.canonical import python_numbers
from backend.ingest.fast_parquet import Unsupported
from backend.ingest.tokenize import Tokenizer

BLOCK_BYTES = 32 << 20
"""Bytes of JSONL parsed at once (whole lines): ~0.65M tokens of `bench ingest`'s native records. Three
blocks are in flight at most (parsed ahead, keyed, being stored: `native.stage_jsonl`), less than what the
line-by-line path holds per chunk (`CHUNK_TOKENS`) in python objects."""

_INT_LISTS = frozenset(rules.of_kind(rules.IDS))
_FLOAT_LISTS = frozenset(rules.of_kind(rules.PER_TOKEN))
FIELDS = frozenset({"prompt", "response", "step", "group", "rewards", "tokens", *_INT_LISTS, *_FLOAT_LISTS})
"""The fields this path takes; a block whose first record has another (meta, token_rewards, extras, ...)
is read line by line."""
_NUMPY = orjson.OPT_SERIALIZE_NUMPY


@dataclass
class Block:
    """Whole lines of a JSONL file, the first of them line `first_line` (1-based): `data[starts[k]:ends[k]]`
    is its k-th non-blank line without the newline (a record; nothing between two newlines is none)."""

    data: bytes
    starts: list[int]
    ends: list[int]
    first_line: int
    newlines: int

    def raw_lines(self) -> Iterator[tuple[int, bytes]]:
        """(line number, bytes with the newline) of every line, blank ones included (`fast_jsonl`'s input)."""
        start, lineno = 0, self.first_line
        while start < len(self.data):
            end = self.data.find(b"\n", start)
            end = len(self.data) if end < 0 else end + 1
            yield lineno, self.data[start:end]
            start, lineno = end, lineno + 1


def iter_blocks(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[Block]:
    """The file in blocks of whole lines of about `block_bytes` (a longer line makes its block longer)."""
    first_line = 1
    for data in iter_block_bytes(path, block_bytes):
        block = _block(data, first_line)
        first_line += block.newlines
        yield block


def iter_block_bytes(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[bytes]:
    """The bytes of each block of `iter_blocks`, whole lines, not yet cut into lines."""
    with open(path, "rb") as fh:
        while data := fh.read(block_bytes):
            cut = data.rfind(b"\n") + 1
            while not cut:  # a line longer than the block: read on to its end
                more = fh.read(block_bytes)
                if not more:
                    break  # the last line, without a newline
                last = more.rfind(b"\n")
                cut = len(data) + last + 1 if last >= 0 else 0
                data += more
            if 0 < cut < len(data):
                fh.seek(cut - len(data), 1)  # the next block starts with the line cut here
                data = data[:cut]
            yield data


def _block(data: bytes, first_line: int) -> Block:
    starts, ends = [], []
    start = newlines = 0
    while start < len(data):
        end = data.find(b"\n", start)
        if end < 0:
            end = len(data)
        else:
            newlines += 1
        if end > start:  # a blank line is no record
            starts.append(start)
            ends.append(end)
        start = end + 1
    return Block(data, starts, ends, first_line, newlines)


def _schema(first: dict) -> pa.Schema:
    """The Arrow schema of a block from its first record, or `Unsupported`. Numbers keep their JSON kind:
    an int among floats (or the reverse) would not be proven, and the block goes line by line."""
    fields = []
    for name, value in first.items():
        if name not in FIELDS:
            raise Unsupported
        if name in ("prompt", "response"):
            kind = pa.string() if isinstance(value, str) else None
        elif name == "step":
            kind = pa.int64() if _is_int(value) else None
        elif name == "group":
            kind = pa.int64() if _is_int(value) else pa.string() if isinstance(value, str) else None
        elif name in _INT_LISTS:
            kind = pa.list_(pa.int64()) if isinstance(value, list) else None
        elif name in _FLOAT_LISTS:
            kind = pa.list_(pa.float64()) if isinstance(value, list) else None
        elif name == "tokens":
            kind = pa.list_(pa.string()) if isinstance(value, list) else None
        else:  # rewards
            kind = _scores_type(value)
        if kind is None:
            raise Unsupported
        fields.append(pa.field(name, kind))
    if "token_ids" not in first or "rewards" not in first:
        raise Unsupported
    return pa.schema(fields)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _scores_type(value: object) -> pa.DataType | None:
    if not isinstance(value, dict) or not value or not all(k.isascii() for k in value):
        return None
    channels = []
    for channel, score in value.items():
        if isinstance(score, float):
            channels.append((channel, pa.float64()))
        elif _is_int(score):
            channels.append((channel, pa.int64()))
        else:
            return None
    return pa.struct(channels)


def read_table(block: Block) -> pa.Table:
    """The block's records as a table in its first record's schema (pyarrow's reader), or `Unsupported`."""
    if not len(block.starts):
        raise Unsupported
    try:
        first = orjson.loads(block.data[block.starts[0] : block.ends[0]])
    except orjson.JSONDecodeError:
        raise Unsupported from None
    if not isinstance(first, dict):
        raise Unsupported
    schema = _schema(first)
    try:
        table = pj.read_json(
            pa.BufferReader(block.data),
            parse_options=pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error"),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        raise Unsupported from None
    if table.num_rows != len(block.starts):
        raise Unsupported  # e.g. two objects on one line, or a line of spaces
    return table.combine_chunks()


def read_ahead(path: Path, block_bytes: int = BLOCK_BYTES) -> Iterator[tuple[Block, Future]]:
    """The file's blocks, each with its `read_table` (a future), the next block's parsed in a thread while
    the caller works on this one: pyarrow's reader releases the GIL."""
    with ThreadPoolExecutor(1, thread_name_prefix="jsonl-read") as pool:
        pending = None
        for block in iter_blocks(path, block_bytes):
            parsed = (block, pool.submit(read_table, block))
            if pending is not None:
                yield pending
            pending = parsed
        if pending is not None:
            yield pending


def parse_block(
    block: Block, name: str, first_index: int, table: pa.Table | None = None
) -> tuple[pa.Table, np.ndarray]:
    """(the block's records as a table, their record keys), or `Unsupported`; `table`: its `read_table`."""
    table = read_table(block) if table is None else table
    return table, _keys(table, block, name, first_index)


def _keys(table: pa.Table, block: Block, name: str, first_index: int) -> np.ndarray:
    """Each row's record key, from its canonical text; `Unsupported` unless every line is proven."""
    order = table.column_names  # the lines' own field order (checked line by line below)
    members = {column: _members(column, table.column(column).chunk(0)) for column in order}
    by_name = sorted(order)
    data, starts, ends = block.data, block.starts, block.ends
    keys = np.empty(table.num_rows, dtype=np.int64)
    for i in range(table.num_rows):
        for variant in (0, 1):  # the line's strings with \u escapes (json.dumps's default), or as UTF-8
            line = b"{" + b", ".join(m for c in order if (m := members[c][variant][i]) is not None) + b"}"
            if len(line) == ends[i] - starts[i] and data.startswith(line, starts[i]):
                break
        else:
            raise Unsupported
        canonical = [members[c][2][i] for c in by_name]
        text = b"{" + b", ".join(m for m in canonical if m is not None) + b"}"
        prefix = f"{name}\x1f{first_index + i}\x1f".encode("utf-8", "surrogatepass")
        digest = hashlib.blake2b(prefix, digest_size=8)
        digest.update(text)
        keys[i] = int.from_bytes(digest.digest(), "little", signed=True)
    return keys


def _members(name: str, column: pa.Array) -> tuple[list, list, list]:
    """`"name": value` per row as a line writes it (with \\u escapes, and with UTF-8 text) and as the
    canonical text does; None where the row has no value (an absent field: the proof rejects a line that
    wrote null)."""
    head = json.dumps(name).encode() + b": "
    valid = column.is_valid().to_numpy(zero_copy_only=False).tolist()
    if pa.types.is_list(column.type) and pa.types.is_string(column.type.value_type):
        return _labels_members(head, column, valid)
    if pa.types.is_list(column.type):
        texts = _list_texts(column, valid)
    elif pa.types.is_struct(column.type):
        return _struct_members(head, column, valid)
    elif pa.types.is_string(column.type):
        written, canonical = [], []
        for text in column.to_pylist():
            if text is None:
                written.append(None)
                canonical.append(None)
            elif text.isascii():
                written.append(head + json.dumps(text).encode())
                canonical.append(written[-1])
            else:  # `json.dumps` writes \u escapes by default; the canonical text keeps the characters
                written.append(head + json.dumps(text).encode())
                canonical.append(head + json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))
        return written, canonical, canonical
    else:  # integers: step, group
        texts = [None if v is None else str(v).encode() for v in column.to_pylist()]
    out = [None if t is None else head + t for t in texts]
    return out, out, out


def _list_texts(column: pa.ListArray, valid: list[bool]) -> list:
    """Each row's list of numbers as `json.dumps` writes it, formatted by orjson from the flat values."""
    values = column.values
    if values.null_count:
        raise Unsupported  # a null inside a list: the line-by-line reader words its error
    offsets = column.offsets.to_numpy()  # (B + 1,)
    flat = values.to_numpy()  # (N,) int64 or float64
    unlike = np.zeros(len(valid), dtype=bool)  # rows with a number orjson writes unlike python
    if pa.types.is_floating(values.type):
        size = np.abs(flat)
        odd = np.flatnonzero(((size < 1e-4) & (size > 0)) | (size >= 1e16))
        unlike[np.searchsorted(offsets, odd, side="right") - 1] = True
    offsets = offsets.tolist()
    texts = []
    for i, ok in enumerate(valid):
        if not ok:
            texts.append(None)
            continue
        data = orjson.dumps(flat[offsets[i] : offsets[i + 1]], option=_NUMPY)
        texts.append(python_numbers(data) if unlike[i] else data.replace(b",", b", "))
    return texts


def _labels_members(head: bytes, column: pa.ListArray, valid: list[bool]) -> tuple[list, list, list]:
    """Lists of strings (`tokens`): each distinct string quoted by `json.dumps` once (both ways: with
    \\u escapes as the line may write it, and as the canonical text does), the lists joined by Arrow."""
    values = column.values
    if values.null_count:
        raise Unsupported
    encoded = pc.dictionary_encode(values)
    distinct = encoded.dictionary.to_pylist()
    quoted = pa.array([json.dumps(text) for text in distinct], pa.string())
    offsets = column.offsets

    def rows(strings: pa.Array) -> list:
        lists = pa.ListArray.from_arrays(offsets, strings.take(encoded.indices))
        joined = pc.binary_join(lists, ", ").to_pylist()
        return [None if not ok else head + b"[" + joined[i].encode() + b"]" for i, ok in enumerate(valid)]

    written = rows(quoted)
    if all(text.isascii() for text in distinct):
        return written, written, written
    canonical = rows(pa.array([json.dumps(text, ensure_ascii=False) for text in distinct], pa.string()))
    return written, canonical, canonical


def _struct_members(head: bytes, column: pa.StructArray, valid: list[bool]) -> tuple[list, list, list]:
    """The scores: `{"channel": number, ...}` in the line's channel order and sorted."""
    keys = [json.dumps(f.name).encode() + b": " for f in column.type]
    sorted_keys = sorted(range(len(keys)), key=lambda k: column.type[k].name)
    children = [
        [None if v is None else (repr(v) if isinstance(v, float) else str(v)).encode() for v in child]
        for child in (c.to_pylist() for c in column.flatten())
    ]
    written, canonical = [], []
    for i, ok in enumerate(valid):
        if not ok:
            written.append(None)
            canonical.append(None)
            continue
        items = [keys[k] + children[k][i] if children[k][i] is not None else None for k in range(len(keys))]
        written.append(head + b"{" + b", ".join(m for m in items if m is not None) + b"}")
        canonical.append(
            head + b"{" + b", ".join(items[k] for k in sorted_keys if items[k] is not None) + b"}"
        )
    return written, written, canonical


def to_batch(table: pa.Table, tokenizer: Tokenizer) -> tuple[pa.RecordBatch, pa.Array]:
    """The record batch `fast_parquet.convert_batch` reads (and the stored meta column), as
    `fast_jsonl.to_batch` builds it from the same records: token labels, no ground truth, meta `{}`."""
    columns = {name: table.column(name).chunk(0) for name in table.column_names}
    if "step" not in columns:
        columns["step"] = pa.array(np.zeros(table.num_rows, dtype=np.int64))
    rewards = columns["rewards"]
    columns["rewards"] = pa.StructArray.from_arrays(
        [child.cast(pa.float64()) for child in rewards.flatten()],
        fields=[pa.field(f.name, pa.float64()) for f in rewards.type],
        mask=rewards.is_null(),
    )
    token_ids = columns["token_ids"]
    if "tokens" in columns:
        if columns["tokens"].null_count:
            raise Unsupported  # some records have labels and some not: the line-by-line path mixes them
    elif tokenizer.hf is None:
        labels = pc.binary_join_element_wise("<", token_ids.values.cast(pa.string()), ">", "")
        columns["tokens"] = pa.ListArray.from_arrays(token_ids.offsets, labels, mask=token_ids.is_null())
    else:
        columns["tokens"] = pa.array(
            [None if ids is None else tokenizer.display(ids) for ids in token_ids.to_pylist()],
            pa.list_(pa.string()),
        )
    columns["ground_truth"] = pa.nulls(table.num_rows, pa.string())
    meta = pa.array(np.full(table.num_rows, "{}", dtype=object), pa.string())
    return pa.RecordBatch.from_pydict(columns), meta
