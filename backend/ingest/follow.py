"""`creditlens import --follow DIR`: tail a live run directory (verl `rollout_data_dir`, TRL
`completions/`, a folder of native step files such as `creditlens.integrations.trl` writes), importing
each new step file, atomically, as soon as it is complete.

A file counts as complete when its size has not changed between two polls and it reads whole: a
Parquet file's footer opens, a JSONL file ends with a newline (verl writes its step file in one go or
line by line; TRL's `to_parquet` writes the footer last). A file that changes after its import is
imported again; the record keys skip the records the run already has, so only new ones are added.
The store is opened per poll, so the app and other readers see the steps as they land; the files
ready at one poll are imported under one write connection, one transaction each. A folder that does
not exist yet is waited for: the trainer's recorder creates it with its first step, and `watch` is started
before the trainer.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pyarrow.parquet as pq

from backend.core.errors import InputError
from backend.ingest import ImportReport, formats, import_path
from backend.ingest.append import check_follow
from backend.store import Store, StoreBusy


def _complete(path: Path) -> bool:
    try:
        if path.suffix == ".parquet":
            pq.ParquetFile(path).metadata  # noqa: B018 - raises until the footer is written
            return True
        with open(path, "rb") as fh:
            fh.seek(0, 2)
            if fh.tell() == 0:
                return False
            fh.seek(-1, 2)
            return fh.read(1) == b"\n"
    except Exception:  # noqa: BLE001 - a file being written reads as anything; try again next poll
        return False


def _step_files(directory: Path, fmt: str | None) -> tuple[str | None, list[Path]]:
    if fmt is None:
        try:
            fmt = formats.detect(directory, among=formats.followed()).name
        except InputError:
            return None, []  # nothing written yet
    return fmt, formats.get(fmt).files(directory)


def _appeared(
    directory: Path,
    poll_seconds: float,
    stop: Callable[[], bool] | None,
    on_waiting: Callable[[Path], None] | None,
) -> bool:
    """Wait for `directory` to exist (saying so once); False when `stop()` came first."""
    if directory.is_dir():
        return True
    if on_waiting is not None:
        on_waiting(directory)
    while stop is None or not stop():
        if directory.is_dir():
            return True
        if directory.exists():
            raise InputError(f"{directory}: --follow needs a directory, and a file of that name appeared")
        time.sleep(poll_seconds)
    return False


def _ready(
    files: list[Path], imported: dict[Path, tuple[int, int]], last_seen: dict[Path, tuple[int, int]]
) -> list[tuple[Path, tuple[int, int]]]:
    """The files to import at this poll, each with its (size, mtime_ns): complete, unchanged since the last
    poll (`last_seen`, updated here), and new or changed since their import (`imported`)."""
    ready = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        state = (st.st_size, st.st_mtime_ns)
        stable = last_seen.get(f) == state
        last_seen[f] = state
        if imported.get(f) != state and stable and _complete(f):
            ready.append((f, state))
    return ready


def follow(
    open_store: Callable[[], AbstractContextManager[Store]],
    directory: str | Path,
    run: str,
    fmt: str | None = None,
    on_report: Callable[[ImportReport, Path], None] | None = None,
    poll_seconds: float = 1.0,
    stop: Callable[[], bool] | None = None,
    on_busy: Callable[[StoreBusy, Path], None] | None = None,
    on_waiting: Callable[[Path], None] | None = None,
    on_batch: Callable[[], None] | None = None,
    **import_options,
) -> tuple[int, int]:
    """Import step files of `directory` into `run` as they appear, until `stop()` is true or the process
    gets KeyboardInterrupt (Ctrl-C), which propagates after the file in progress was either imported
    whole or not at all. Returns (files imported, rollouts added). Where the store is busy past the lock
    wait (`StoreBusy`), at the start or for a step file, `on_busy` gets the error and the path, and the
    next poll tries again; without `on_busy`, it raises. A `directory` that does not exist yet is waited for
    (`on_waiting` gets it once, to say so); a path that is not a directory is refused. The files ready at
    one poll are imported under one open of the store, `on_report` called as each commits, and `on_batch`
    (the live monitors) once the store is closed again.

    An existing `run` is followed only when `directory` (or a file in it) was imported into it before, or
    with `append=True` among `import_options`; each new step file then appends to it (`import_path` with
    `append=True`, which still checks the run's model and channels)."""
    directory = Path(directory)
    if directory.exists() and not directory.is_dir():
        raise InputError(
            f"{directory}: --follow needs a directory (a verl rollout_data_dir, a TRL "
            "output/completions directory or a folder of native step files)"
        )
    if fmt not in (None, *formats.followed()):
        raise InputError(
            f"{directory}: --follow reads verl, trl or native step-file directories, not {fmt!r}"
        )
    append = bool(import_options.pop("append", False))
    while True:
        try:
            with open_store() as store:
                check_follow(store, run, directory, append)
            break
        except StoreBusy as exc:  # as for a step file below
            if on_busy is None:
                raise
            on_busy(exc, directory)
            time.sleep(poll_seconds)
    if not _appeared(directory, poll_seconds, stop, on_waiting):
        return 0, 0
    imported: dict[Path, tuple[int, int]] = {}  # file -> (size, mtime_ns) at its import
    last_seen: dict[Path, tuple[int, int]] = {}
    files_done = rollouts = 0
    while stop is None or not stop():
        fmt_now, files = _step_files(directory, fmt)
        ready = _ready(files, imported, last_seen)
        try:
            if ready:
                # every file ready at this poll under one write connection, each in its own transaction: a
                # trainer that got ahead (or a follower started late) is caught up in one go, and a reader
                # (the app redrawing after each commit) cannot slip in between the files and hold the next
                # one back for a whole page run
                with open_store() as store:
                    for f, state in ready:
                        report = import_path(store, f, run, fmt=fmt_now, append=True, **import_options)
                        imported[f] = state
                        files_done += 1
                        rollouts += report.records
                        if on_report is not None:  # said as each commits: a Ctrl-C loses no line
                            on_report(report, f)
                if on_batch is not None:  # once the store is closed: it may read the store
                    on_batch()
        except StoreBusy as exc:
            # another process held the write lock past the wait (an import, a resample): a training run
            # outlives that, so the files not yet imported stay so and the next poll tries them again
            if on_busy is None:
                raise
            on_busy(exc, next(f for f, state in ready if imported.get(f) != state))
        time.sleep(poll_seconds)
    return files_done, rollouts
