"""Readers: each yields native records `(where, dict)` from a file, streaming.

- native JSONL / Parquet (docs/importing.md; Parquet with `token_ids` also has a vectorized fast path
  in `backend.ingest.fast_parquet`)
- verl `rollout_data_dir` dumps: `<step>.jsonl` with input, output, gts, score, step, extra keys
- TRL `completions/completions_*.parquet`: the file listing here, the reader in `backend.ingest.trl`
Every record a reader yields carries a `record_key` (see `record_key`): imports skip keys the run has.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from backend.core.errors import InputError, named, quoted
from backend.ingest.canonical import record_key_of_text
from backend.ingest.native_rules import check_channel_name

PARQUET_ERRORS = (pa.ArrowException, OSError, UnicodeDecodeError)
"""What pyarrow raises for a damaged Parquet file: its own errors, the OS's, and a UnicodeDecodeError where a
damaged footer's column names are not UTF-8."""
Progress = Callable[[int], None]  # called with bytes (or rows) consumed since the last call


def iter_jsonl(path: Path, progress: Progress | None = None) -> Iterator[tuple[str, object]]:
    """Yield `(where, parsed)` per non-empty line. NaN/Infinity literals parse to floats so that the
    record validator can name the field that holds them."""
    with open(path, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            if progress:
                progress(len(raw))
            where = f"{path}: line {lineno}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                raise InputError(f"{where}: not valid UTF-8 (byte {exc.start})") from None
            if not text.strip():
                continue
            try:
                yield where, json.loads(text)
            except (json.JSONDecodeError, ValueError) as exc:
                raise InputError(f"{where}: malformed JSON ({str(exc).splitlines()[0]})") from None
            except RecursionError:
                raise InputError(f"{where}: malformed JSON (nested too deeply)") from None


def iter_parquet_rows(
    path: Path, progress: Progress | None = None, batch_size: int = 2048
) -> Iterator[tuple[str, dict]]:
    try:
        reader = pq.ParquetFile(path, pre_buffer=False)  # bounded memory: see __init__
    except PARQUET_ERRORS as exc:
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    offset = 0
    for batch in read_batches(reader, path, batch_size):
        for k, row in enumerate(batch.to_pylist()):
            yield f"{path}: record {offset + k + 1}", row
        offset += batch.num_rows
        if progress:
            progress(batch.num_rows)


def read_batches(
    reader: pq.ParquetFile,
    path: Path,
    batch_size: int,
    row_groups: list[int] | None = None,
    offset: int = 0,
) -> Iterator[pa.RecordBatch]:
    """Record batches of a Parquet file (or of its `row_groups`, whose first record is number `offset`); a
    file whose footer reads but whose pages are damaged (or whose strings are not UTF-8) fails here,
    mid-file, and becomes an `InputError` naming it."""
    batches = reader.iter_batches(batch_size=batch_size, row_groups=row_groups)
    while True:
        try:
            batch = next(batches)
        except StopIteration:
            return
        except PARQUET_ERRORS as exc:
            raise InputError(
                f"{path}: record {offset + 1} onwards: damaged Parquet data ({str(exc).splitlines()[0]})"
            ) from None
        check_columns(batch, f"{path}: record {offset + 1} onwards")
        offset += batch.num_rows
        yield batch


def check_columns(data: pa.RecordBatch | pa.Table, where: str) -> None:
    """Every column of `data` whole, its strings UTF-8 included: Parquet's reader leaves them unchecked, and
    bytes that are not UTF-8 would fail later, in `to_pylist`, as a UnicodeDecodeError that names nothing."""
    for name, column in zip(data.column_names, data.columns, strict=True):
        try:
            for chunk in getattr(column, "chunks", [column]):  # a Table's column is chunked
                chunk.validate(full=True)
        except pa.ArrowException as exc:
            raise InputError(
                f"{where}: damaged Parquet data (column {name!r}: {str(exc).splitlines()[0]})"
            ) from None


def _sorted_step_files(directory: Path, pattern: str) -> list[Path]:
    files = [p for p in directory.glob(pattern) if p.is_file()]

    def key(p: Path):
        digits = re.findall(r"\d+", p.stem)
        return (int(digits[-1]) if digits else -1, p.name)

    return sorted(files, key=key)


def jsonl_step_files(directory: Path) -> list[Path]:
    """A folder's `*.jsonl` files in step order (the number in each name)."""
    return _sorted_step_files(directory, "*.jsonl")


def first_record(path: Path) -> object:
    """The first record of a JSONL file, None when it has none or its first line is malformed (the
    importer reports that line with its number)."""
    try:
        for _where, obj in iter_jsonl(path):
            return obj
    except InputError:
        return None
    return None


def verl_files(path: Path) -> list[Path]:
    return [path] if path.is_file() else jsonl_step_files(path)


def trl_files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    found = _sorted_step_files(path, "completions_*.parquet") or _sorted_step_files(
        path / "completions", "completions_*.parquet"
    )
    return found


def record_key(name: str, index: int, content: object) -> int:
    """A record's identity for idempotent imports: (file name, position in the file, content) as a
    signed 64-bit hash. The file name, not its path: the same file reached through a directory, a
    subdirectory or directly gives the same key; a grown file keeps its earlier records' keys."""
    text = (
        content
        if isinstance(content, str)
        else json.dumps(content, sort_keys=True, ensure_ascii=False, default=str)
    )
    return record_key_of_text(name, index, text)


@dataclass
class ReadNotes:
    """What the readers tell the import summary: lines (deduplicated, in order) and counts."""

    lines: dict[str, None] = field(default_factory=dict)
    unscorable: int = 0
    channels: dict[str, None] = field(default_factory=dict)
    """The channels the reader made (a column that is all NaN in a file still names its channel)."""

    def add(self, line: str) -> None:
        self.lines[line] = None


def _plain(value: object) -> object:
    """A JSON-able python value: NaN/inf floats become None (JSON has none), numpy scalars python."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _channel_list(channels: list[str] | None, have: list[str], where: str) -> list[str] | None:
    if channels is None:
        return None
    missing = [c for c in channels if c not in have]
    if missing:
        raise InputError(
            f"{where}: --channels names {', '.join(missing)}, not in the file; it has {', '.join(have)}"
        )
    return channels


VERL_RESERVED = {"input", "output", "gts", "score", "step"}
VERL_KEY_FORMAT = re.compile(r"^(?P<prompt>.+)_(?P<session>\d+)_(?P<index>\d+)$")


def verl_group(uid: object) -> object:
    """verl's v1 trainer dumps `uid` as its TransferQueue key `{prompt uid}_{session}_{index}`
    (verl/trainer/ppo/v1/agent_loop_tq.py): the prompt uid is the group. Other uids are the group."""
    if isinstance(uid, str):
        match = VERL_KEY_FORMAT.match(uid)
        return match.group("prompt") if match else uid
    return uid if isinstance(uid, int) and not isinstance(uid, bool) else None


def verl_records(
    files: list[Path],
    progress: Progress | None = None,
    notes: ReadNotes | None = None,
    channels: list[str] | None = None,
) -> Iterator[tuple[str, dict]]:
    """verl dump lines -> native records.

    `score` is the reward verl trains on (the legacy trainer dumps `token_level_scores.sum(-1)`) and becomes
    the `task` channel. The other numeric keys are verl's `reward_extra_info`: every key of the dict a
    reward function returns beside `score` (`NaiveRewardManager.__call__` in
    `verl/workers/reward_manager/naive.py` appends each to `reward_extra_info[key]`; `dapo.py` adds
    `acc = reward > 0` for a plain score), dumped by `_write_generations` as extra keys. They describe a
    rollout, they are not rewards, so they become per-rollout metrics (booleans as 1/0), never channels;
    `channels` promotes chosen keys to channels (`score` among them names the task channel). Other keys
    (uid, request_id, strings, lists) -> meta. Groups: by `uid` when present (v1 trainer), else by prompt
    text and step."""
    notes = notes if notes is not None else ReadNotes()
    for path in files:
        step_from_name = re.findall(r"\d+", path.stem)
        for index, (where, obj) in enumerate(iter_jsonl(path, progress)):
            if not isinstance(obj, dict):
                raise InputError(f"{where}: a record must be a JSON object")
            for name in ("input", "output", "score"):
                if name not in obj:
                    raise InputError(f"{where}: missing required verl field {name!r}")
            chosen = _channel_list(channels, list(obj), where)
            step = obj.get("step", int(step_from_name[-1]) if step_from_name else 0)
            rewards: dict = {}
            metrics: dict = {}
            meta: dict = {}
            as_channels, as_metrics, as_meta = [], [], []
            for key, value in obj.items():
                if key in VERL_RESERVED and key != "score":
                    continue
                is_number = isinstance(value, (int, float))  # bools count: verl logs acc as true/false
                if (key in chosen) if chosen is not None else key == "score":
                    if value is None:
                        continue  # no score on this channel: never a silent 0
                    if not is_number:
                        raise InputError(
                            f"{where}: field {key!r} must be a number to be a channel, got {value!r:.40}"
                        )
                    check_channel_name(where, key, f"field {quoted(key)} names the channel")
                    # huge ints stay ints so the validator reports them (float() would overflow here)
                    rewards["task" if key == "score" else key] = value if type(value) is int else float(value)
                    as_channels.append(key)
                elif is_number:
                    if math.isfinite(value) if isinstance(value, float) else True:
                        metrics[key] = value  # a NaN metric (json.dumps writes NaN) is no value
                    as_metrics.append(key)
                elif key != "score":
                    meta[key] = value
                    as_meta.append(key)
            if not rewards:
                notes.unscorable += 1
            declared = chosen if chosen is not None else ["score"]  # a null score still names its channel
            notes.channels.update(dict.fromkeys("task" if c == "score" else c for c in declared))
            notes.add(
                f"channels: {', '.join(('score -> task' if c == 'score' else named(c)) for c in as_channels)}"
                + (
                    f"; metrics (per rollout, not rewards): {', '.join(map(named, as_metrics))}"
                    if as_metrics
                    else ""
                )
                + (f"; kept in meta: {', '.join(map(named, as_meta))}" if as_meta else "")
            )
            group = verl_group(obj["uid"]) if "uid" in obj else None
            notes.add(
                "groups: by uid (verl v1 trainer)"
                if group is not None
                else "groups: by prompt text and step (no uid in the dump)"
            )
            gts = obj.get("gts")
            yield (
                where,
                {
                    "prompt": obj["input"],
                    "response": obj["output"],
                    "step": step,
                    "group": group,
                    "rewards": rewards,
                    "metrics": metrics,
                    "meta": meta,
                    "ground_truth": None
                    if gts is None
                    else (gts if isinstance(gts, str) else json.dumps(gts, ensure_ascii=False)),
                    "record_key": record_key(path.name, index, obj),
                },
            )
