"""The import pipeline: a path's format and files, its records read and validated, staged and published
into the store (`import_path`, `import_records`, `import_batches`; `backend.ingest` re-exports them).

Every import is atomic: chunks of validated records commit into a hidden staging run and one small
last transaction publishes it, so a failure (or a killed process) leaves the store as it was, while
memory stays bounded by the chunk size and a DuckDB buffer-pool cap, not by the file size (DuckDB
holds an open transaction's rows in memory, so one big transaction per import would not be).
Imports are idempotent by content: a file already imported into the run (by content hash) adds
nothing, and every record a reader yields carries a key of (file name, position, content), so a record
already in the run is skipped whatever path reaches it (a directory, a subdirectory, one of its files,
the same directory after it grew). The summary says how many were skipped.
"""

from __future__ import annotations

import hashlib
import os
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from tqdm import tqdm

from backend.core.batch_fields import ALL_CHANNELS
from backend.core.errors import InputError, StoreError
from backend.core.workers import Workers
from backend.ingest import append as append_rules
from backend.ingest import formats, native, recorded_checkpoints, run_config, sniff
from backend.ingest.formats import FormatSpec, ReadContext
from backend.ingest.records import ChunkBuffer, validate_record
from backend.ingest.report import ImportReport
from backend.ingest.sources import ReadNotes
from backend.ingest.tokenize import Tokenizer
from backend.store import Store
from backend.store.checkpoints import attach_from_spec, parse_model_spec
from backend.store.explorer_queries import fill_rollout_summary

CHUNK_RECORDS = 2048
CHUNK_TOKENS = 1_000_000
# DuckDB's buffer pool during an import (committed chunks are evicted to the file beyond it), and the size at
# which the write-ahead log is folded into the file (not once per commit: docs/benchmarks.md, "Import").
IMPORT_MEMORY_LIMIT = os.environ.get("CREDITLENS_IMPORT_MEMORY", "256MB")


def _chosen_format(path: Path, fmt: str | None) -> FormatSpec:
    """The detected format, or `fmt` when the path holds what it reads (see `sniff`)."""
    if fmt is None:
        return formats.detect(path)
    spec = formats.get(fmt, path)
    sniff.check_format(path, fmt)  # a --format that cannot read the file says what the file is
    return spec


def _files_of(path: Path, spec: FormatSpec) -> list[Path]:
    files = spec.files(path)
    if not files:
        raise InputError(f"{path}: this directory has no {spec.name} files")
    for f in files:
        if not f.is_file():
            raise InputError(f"{f}: not a readable file")
    return files


def _parquet_rows(path: Path) -> int:
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for corrupt files
        raise InputError(f"{path}: not a readable Parquet file ({str(exc).splitlines()[0]})") from None


def content_hash(files: list[Path], root: Path) -> str:
    digest = hashlib.sha256()
    for f in files:
        digest.update(str(f.relative_to(root) if f != root else f.name).encode())
        try:
            with open(f, "rb") as fh:
                while block := fh.read(1 << 22):
                    digest.update(block)
        except OSError as exc:
            raise InputError(f"{f}: cannot read ({exc.strerror})") from None
    return digest.hexdigest()


class _Bar:
    """A tqdm bar on stderr, or a callback with the fraction done (the app's progress bar)."""

    def __init__(self, total: int, unit: str, show: bool, callback: Callable[[float], None] | None):
        self.total, self.done, self.callback = max(total, 1), 0, callback
        self.bar = None
        if show:
            self.bar = tqdm(
                total=total,
                unit=unit,
                unit_scale=True,
                file=sys.stderr,
                leave=False,
                desc="import",
                disable=None,  # a bar on terminals only: logs and pipes get just the result line
            )

    def __call__(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        if self.callback is not None:
            self.callback(min(1.0, self.done / self.total))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def import_path(
    store: Store,
    path: str | Path,
    run: str,
    fmt: str | None = None,
    model_dir: str | None = None,
    verifier: str | None = None,
    source: str | None = None,
    show_progress: bool = False,
    on_progress: Callable[[float], None] | None = None,
    channels: list[str] | None = None,
    group_size: int | None = None,
    main_channel: str | None = None,
    append: bool = False,
    workers: Workers | None = None,
) -> ImportReport:
    """Import a file or directory into `run` (created if new), atomically (see the module docstring).
    Adding to an existing run needs `append` unless the import continues what the run holds, and always
    the run's tokenizer and channels (`backend.ingest.append`). `model_dir` is stored resolved (absolute).

    `channels`: the columns (TRL) or keys (verl) that become reward channels, instead of the default
    (TRL: the float columns; verl: `score`; other numbers are per-rollout metrics). `group_size`: TRL's
    num_generations, the size of the consecutive blocks that form groups. `main_channel`: the run's main
    channel (one of its channels or `all`; default for a new run: task, else its one channel, else all).
    `workers`: how native files split (default: the command's, `backend.core.workers.current`)."""
    path = Path(path)
    if not path.exists():
        raise InputError(f"{path}: no such file or directory")
    format_spec = _chosen_format(path, fmt)
    formats.check_options(path, format_spec, channels=channels, group_size=group_size)
    if group_size is not None and group_size < 1:
        raise InputError(f"--group-size must be at least 1, got {group_size}")
    files = _files_of(path, format_spec)
    config = run_config.find(path)  # first: a broken configuration file stops the import before it starts
    fmt = format_spec.name
    model_spec = parse_model_spec(model_dir)  # a folder, a {step} template or a step -> folder file
    model_dir = model_spec.tokenizer_dir
    tokenizer = Tokenizer(model_dir)
    file_hash = content_hash(files, path)
    by_rows = format_spec.counts_rows or any(f.suffix == ".parquet" for f in files)
    total = sum(_parquet_rows(f) for f in files) if by_rows else sum(f.stat().st_size for f in files)
    bar = _Bar(total, "rec" if by_rows else "B", show_progress, on_progress)
    notes = ReadNotes()
    try:
        context = ReadContext(bar, notes, tokenizer, channels, group_size)
        # no reader: native Parquet or JSONL, the vectorized paths (see _stage)
        records = format_spec.reader(files, context) if format_spec.reader is not None else None
        report = _import(
            store,
            run,
            fmt,
            records,
            files if records is None else None,
            tokenizer,
            file_hash,
            str(path),
            source or f"{fmt} import",
            verifier,
            model_dir,
            bar,
            notes,
            main_channel,
            append=append,
            source_path=path,
            workers=workers,
        )
    finally:
        bar.close()
    run_config.keep(store, run, config)
    report.notes.extend(recorded_checkpoints.attach(store, run, files) if fmt == "native" else [])
    note = attach_from_spec(store, run, model_spec)  # the steps this import brought get their checkpoints too
    if note is not None:
        report.notes.append(note)
    return report


def _absolute(model_dir: str | None) -> str | None:
    """The model folder as an absolute path: a run opened from another folder still finds its model."""
    return str(Path(model_dir).expanduser().resolve()) if model_dir else None


def import_records(
    store: Store,
    run: str,
    records: Iterable[dict],
    source: str = "records",
    verifier: str | None = None,
    model_dir: str | None = None,
    origin: str = "<records>",
    content_key: str | None = None,
    append: bool = False,
) -> ImportReport:
    """Import native-format dicts (synthetic runs, tests). `content_key` makes it idempotent; `append` adds
    to an existing run (see `import_path`)."""
    model_dir = _absolute(model_dir)
    tokenizer = Tokenizer(model_dir) if model_dir else Tokenizer(None)
    numbered = ((f"{origin}: record {i + 1}", rec) for i, rec in enumerate(records))
    return _import(
        store,
        run,
        "native",
        numbered,
        None,
        tokenizer,
        content_key,
        origin,
        source,
        verifier,
        model_dir,
        None,
        append=append,
    )


@dataclass
class ArrowBatches:
    batches: Iterable[pa.RecordBatch]
    origin: str


def import_batches(
    store: Store,
    run: str,
    batches: Iterable[pa.RecordBatch],
    source: str = "records",
    origin: str = "<records>",
    content_key: str | None = None,
    append: bool = False,
) -> ImportReport:
    """Import native-format Arrow record batches with token ids (`creditlens synth`): the vectorized
    path of native Parquet files, staged and atomic like every import. `content_key` makes it idempotent."""
    return _import(
        store,
        run,
        "native",
        ArrowBatches(batches, origin),
        None,
        Tokenizer(None),
        content_key,
        origin,
        source,
        None,
        None,
        None,
        append=append,
    )


def _import(
    store: Store,
    run: str,
    fmt: str,
    records,
    native_paths: list[Path] | None,
    tokenizer: Tokenizer,
    file_hash: str | None,
    origin: str,
    source: str,
    verifier: str | None,
    model_dir: str | None,
    bar,
    notes: ReadNotes | None = None,
    main_channel: str | None = None,
    *,
    append: bool = False,
    source_path: Path | None = None,
    workers: Workers | None = None,
) -> ImportReport:
    """Stage every record in a hidden run, check the addition against the run, then publish it in one
    transaction (the module docstring); a failure anywhere discards the staging run."""
    _check_writable(store, run)
    start = time.perf_counter()
    target_id = store.run_id(run) if store.has_run(run) else None
    if target_id is not None and file_hash is not None and store.import_seen(target_id, file_hash):
        return ImportReport(run, fmt, 0, 0, time.perf_counter() - start, already_imported=True)
    first_id = store.next_rollout_id(target_id) if target_id is not None else 0
    known_groups = store.group_keys(target_id) if target_id is not None else {}
    seen = store.record_keys(target_id) if target_id is not None else set()
    with store.transaction():
        staging_id = store.create_staging_run(source, model_dir, tokenizer.name, verifier)
    notes = notes if notes is not None else ReadNotes()
    try:
        buffer = ChunkBuffer(staging_id, first_id, known_groups)
        with store.memory_limit(IMPORT_MEMORY_LIMIT), store.checkpoint_threshold(IMPORT_MEMORY_LIMIT):
            n_records, n_tokens, tokenization, skipped = _stage(
                store,
                buffer,
                records,
                native_paths,
                tokenizer,
                bar,
                seen,
                file_hash,
                formats.get(fmt).unscorable_ok,
                workers,
            )
        if n_records == 0 and skipped == 0:
            raise InputError(f"{origin}: no records to import (empty file)")
        if target_id is not None and n_records:  # never a merge by accident (backend/ingest/append.py)
            append_rules.check_addition(
                store,
                run,
                target_id,
                staging_id,
                origin,
                n_records,
                skipped,
                source_path,
                append,
                tokenizer.name,
                model_dir,
                notes.channels,
            )
        for line in append_rules.empty_channels(store, staging_id, notes, origin) if n_records else ():
            notes.add(line)  # a reward column without a value anywhere makes no channel: said, not silent
        if target_id is None and n_records and main_channel != ALL_CHANNELS:
            _require_a_score(store, staging_id, notes, origin)
        published = _Published(run, target_id, staging_id, first_id, n_records, n_tokens, fmt, file_hash)
        _publish(store, published, main_channel, notes, source_path, origin)
    except BaseException:
        try:
            store.discard_staging_run(staging_id)  # not once published (a COMMIT under Ctrl-C may land)
        except Exception:  # noqa: BLE001 - e.g. a full disk; the next writer discards the staging run
            pass
        raise
    return ImportReport(
        run,
        fmt,
        n_records,
        n_tokens,
        time.perf_counter() - start,
        tokenization=tokenization,
        skipped=skipped,
        unscorable=notes.unscorable,
        notes=list(notes.lines),
    )


def _check_writable(store: Store, run: str) -> None:
    if store.read_only:
        raise StoreError(f"{store.path}: opened read-only; imports need the writable store")
    if not run or len(run) > 200:
        raise InputError("--run: a run name of 1 to 200 characters is required")
    if run.startswith(Store.STAGING_PREFIX):
        raise InputError(f"--run: names starting with {Store.STAGING_PREFIX!r} are reserved")


@dataclass(frozen=True)
class _Published:
    """What a staged import publishes: into `run` (`target_id` when it exists) from `staging_id`."""

    run: str
    target_id: int | None
    staging_id: int
    first_id: int
    records: int
    tokens: int
    fmt: str
    file_hash: str | None


def _publish(
    store: Store,
    staged: _Published,
    main_channel: str | None,
    notes: ReadNotes,
    source_path: Path | None,
    origin: str,
) -> None:
    """The one last transaction: the staged rows become the run's (or are dropped when every record was
    already in it), with its main channel, its Explorer summaries and the import's record."""
    limit = IMPORT_MEMORY_LIMIT  # DuckDB spills beyond it; the publish's log is folded in at its commit
    with store.memory_limit(limit), store.checkpoint_threshold(limit), store.transaction():
        run_id = staged.target_id  # every record already in the run: nothing to publish
        if staged.records:
            run_id = store.publish_staging_run(
                staged.staging_id, staged.run, staged.target_id, staged.first_id
            )
            if staged.target_id is None or main_channel is not None:  # an append keeps the run's choice
                chosen = store.set_main_channel_of(run_id, main_channel)
                notes.add(
                    f"main channel: {chosen} (what views and commands read by default; change it with "
                    "`creditlens main-channel` or on the Runs page)"
                )
            fill_rollout_summary(store, run_id)  # the Explorer's per-rollout numbers, whole run
        if staged.file_hash is not None and run_id is not None:
            recorded = str(source_path.resolve()) if source_path is not None else origin
            store.record_import(run_id, staged.file_hash, recorded, staged.fmt, staged.records, staged.tokens)
    if not staged.records:
        store.discard_run_rows(staged.staging_id)


def _require_a_score(store: Store, staging_id: int, notes: ReadNotes | None, origin: str) -> None:
    """A new run needs a score somewhere (its main channel is one): refused naming the file, without one."""
    if not store.channels_of(staging_id):
        named = list(notes.channels) if notes is not None else []
        channels = f" (channel{'s' * (len(named) > 1)} {', '.join(map(repr, named))})" if named else ""
        raise InputError(
            f"{origin}: no reward values: every reward column is null or NaN in every row{channels}, so no "
            "rollout has a score"
        )


def _stage(
    store: Store,
    buffer: ChunkBuffer,
    records,
    native_paths: list[Path] | None,
    tokenizer: Tokenizer,
    bar,
    seen: set[int],
    file_hash: str | None,
    unscorable_ok: bool,
    workers: Workers | None = None,
) -> tuple[int, int, str, int]:
    """Validate and insert every record into the staging run, one committed transaction per chunk.
    Records whose key is in `seen` (the run's) are skipped; returns (records, tokens, tokenization,
    skipped). `native_paths`: native files (one, or a folder's step files, each keyed by its own hash so
    that a grown folder, or one of its files imported alone, adds only what the run lacks)."""

    def insert(tables):
        with store.transaction():
            for table in (
                "groups",
                "rollouts",
                "scores",
                "token_rewards",
                "token_features",
                "rollout_metrics",
            ):
                if table in tables:
                    store.insert_arrow(table, tables[table])

    if isinstance(records, ArrowBatches):
        return native.stage_batches(records.batches, buffer, insert, records.origin, CHUNK_RECORDS)
    if native_paths is not None and len(native_paths) > 1:
        totals = [0, 0, "ids", 0]
        for path in native_paths:
            file_hash = content_hash([path], path)
            n, tokens, how, skipped = _stage(
                store, buffer, None, [path], tokenizer, bar, seen, file_hash, unscorable_ok, workers
            )
            totals = [
                totals[0] + n,
                totals[1] + tokens,
                how if how != "ids" else totals[2],
                totals[3] + skipped,
            ]
        return tuple(totals)
    native_path = native_paths[0] if native_paths else None
    if native_path is not None and native_path.suffix == ".parquet":
        return native.stage_parquet(
            native_path, buffer, tokenizer, insert, bar, seen, file_hash, CHUNK_RECORDS, workers, CHUNK_TOKENS
        )
    if native_path is not None:
        return native.stage_jsonl(
            native_path, buffer, tokenizer, insert, bar, seen, CHUNK_RECORDS, CHUNK_TOKENS, workers
        )
    first_id = buffer.next_rollout_id
    n_tokens = skipped = 0
    tokenization = "ids"
    buffered_tokens = 0
    for where, raw in records:
        key = raw.get("record_key") if isinstance(raw, dict) else None
        if key is not None:
            if key in seen:
                skipped += 1
                continue
            seen.add(key)
        rec = validate_record(raw, where, tokenizer, allow_unscorable=unscorable_ok)
        if rec["tokenized"] != "ids":
            tokenization = rec["tokenized"]
        n_tokens += len(rec["token_ids"])
        buffered_tokens += len(rec["token_ids"])
        buffer.add(rec)
        # Long responses fill a chunk by tokens before they fill it by records.
        if len(buffer) >= CHUNK_RECORDS or buffered_tokens >= CHUNK_TOKENS:
            insert(buffer.flush())
            buffered_tokens = 0
    if len(buffer):
        insert(buffer.flush())
    return buffer.next_rollout_id - first_id, n_tokens, tokenization, skipped
