"""Short-lived store connections for long-running processes (the app).

DuckDB lets one process write a file, or several processes read it, never both at once. A server
that held the file open would lock out `creditlens import` for as long as it runs, so the app keeps
a `StoreHandle` (a path) and opens a connection per unit of work, retrying for a while when another
process holds the write lock, then failing with a message that says what to wait for.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from backend.core.errors import StoreError
from backend.store.db import Store, default_db_path

# DuckDB keeps one database instance per file and process: while one thread of a process has the file
# open for writing, another thread's read-only open is refused with this message (and the other way round),
# however briefly the first holds it. The app's threads (a user's session, the server's warm-up, a job) meet
# this when one saves an estimate while another reads; like another process's write lock, it is waited out.
SAME_PROCESS = "same database file with a different configuration"


# Two threads of one process that write at once share DuckDB's database instance, and their transactions
# conflict when they touch the same rows ("TransactionContext Error: Conflict on tuple deletion": the server's
# warm-up and a user's first page both saving a view's summary). The writes of one process to one file take
# turns instead; reads never wait for them.
_WRITERS: dict[Path, threading.RLock] = {}
_WRITERS_GUARD = threading.Lock()


def _writer_lock(path: Path) -> threading.RLock:
    with _WRITERS_GUARD:
        return _WRITERS.setdefault(path.resolve(), threading.RLock())


# Opening a DuckDB file builds a database instance: 20-35 ms of CPU however small the store (an in-memory
# one costs the same), and a view's script run or a whole-run estimate reads through many short
# connections. Inside `StoreHandle.kept_open()` a thread's reads share one read-only connection, opened at
# its first read and closed when the block ends. A write of this process (any thread) first closes every
# kept connection that is not inside a read right now, and the next read opens it again, so a kept
# connection delays a write of this process no more than a read in progress does; another process's write
# (an import) waits for the block, as it waits for a read today, so blocks are one unit of work each (a
# script run of the app).
class _Kept:
    def __init__(self) -> None:
        self.store: Store | None = None
        self.reading = 0  # read blocks in progress on the kept connection
        self.lock = threading.Lock()

    def close_if_idle(self) -> None:
        with self.lock:
            if self.store is not None and self.reading == 0:
                self.store.close()
                self.store = None


_KEPT: dict[Path, set[_Kept]] = {}  # resolved store path -> the kept connections of every thread
_THREAD = threading.local()  # .kept: this thread's {resolved store path: _Kept}


def _close_kept(path: Path) -> None:
    with _WRITERS_GUARD:
        kept = list(_KEPT.get(path.resolve(), ()))
    for k in kept:
        k.close_if_idle()


class StoreBusy(StoreError):
    """Another process holds the store's write lock (an import or a resample is writing)."""


class StoreHandle:
    def __init__(self, path: str | Path, wait_seconds: float = 10.0):
        self.path = Path(path)
        self.wait_seconds = wait_seconds
        if not self.path.exists():
            # create and migrate once, waiting like any write: another process may create the file between
            # the check and the open and hold it (the app importing the bundled runs beside a new follower)
            self._open(read_only=False).close()

    def _open(self, read_only: bool) -> Store:
        deadline = time.monotonic() + self.wait_seconds
        delay = 0.02
        while True:
            if not read_only:
                _close_kept(self.path)  # again on every try: a kept reader may have opened meanwhile
            try:
                return Store(self.path, read_only=read_only)
            except StoreError as exc:
                here = SAME_PROCESS in str(exc)
                if not here and "another process" not in str(exc) and "lock" not in str(exc).lower():
                    raise
                if time.monotonic() >= deadline:
                    who = (
                        "another thread of this process has the store open the other way (reading or writing)"
                        if here
                        else "another process is writing to the store (an import or a resample)"
                    )
                    raise StoreBusy(
                        f"{self.path}: {who}; waited {self.wait_seconds:g} s — try again when it finishes"
                    ) from None
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    @contextmanager
    def read(self) -> Iterator[Store]:
        kept = getattr(_THREAD, "kept", {}).get(self.path.resolve())
        if kept is None:
            store = self._open(read_only=True)
            try:
                yield store
            finally:
                store.close()
            return
        with kept.lock:  # a connection counted as reading is never closed by a writer
            store = kept.store
            if store is not None:
                kept.reading += 1
        if store is None:  # opened outside the lock: a writer's close_if_idle never waits for this open
            store = self._open(read_only=True)
            with kept.lock:  # only this thread sets its kept store
                kept.store = store
                kept.reading += 1
        try:
            yield store
        finally:
            with kept.lock:
                kept.reading -= 1

    @contextmanager
    def kept_open(self) -> Iterator[None]:
        """This thread's reads of this store inside the block share one read-only connection (see `_Kept`);
        a nested block is the outer one."""
        path = self.path.resolve()
        table = _THREAD.__dict__.setdefault("kept", {})
        if path in table:
            yield
            return
        kept = table[path] = _Kept()
        with _WRITERS_GUARD:
            _KEPT.setdefault(path, set()).add(kept)
        try:
            yield
        finally:
            with _WRITERS_GUARD:
                _KEPT[path].discard(kept)
            del table[path]
            kept.close_if_idle()

    @contextmanager
    def write(self) -> Iterator[Store]:
        """A write connection; another thread of this process writing the same store finishes first."""
        lock = _writer_lock(self.path)
        if not lock.acquire(timeout=self.wait_seconds):
            raise StoreBusy(
                f"{self.path}: another thread of this process is writing to the store; waited "
                f"{self.wait_seconds:.0f} s — try again when it finishes"
            )
        try:
            store = self._open(read_only=False)
            try:
                yield store
            finally:
                store.close()
        finally:
            lock.release()


@contextmanager
def kept_only_on_success(db: Path | None) -> Iterator[None]:
    """A store that does not exist yet is kept only if the block succeeds: a failed import against a new
    path leaves no empty store and no folders behind (what existed before is never touched)."""
    path = Path(db or default_db_path())
    missing = [p for p in (path, *path.parents) if not p.exists()]  # the file, then its new folders
    try:
        yield
    except BaseException:
        if missing:
            for leftover in (path, path.with_name(path.name + ".wal")):
                leftover.unlink(missing_ok=True)
            for folder in missing[1:]:
                try:
                    folder.rmdir()  # only when empty: another process may have put something there
                except OSError:
                    break
        raise


class NoSuchStore(StoreError):
    """The store file a command or `creditlens.open` named does not exist (and only `init`, `import` and the
    app create one)."""


def store_handle(db: Path | None, create: bool = False) -> StoreHandle:
    """The store of one command, opened per unit of work. While another process holds the file (an
    import, a resample, the app reading) it waits up to $CREDITLENS_LOCK_WAIT seconds (default 30).

    A store that does not exist is created only with `create` (`init`, `import`, `synth`): any other
    command on a mistyped path raises `NoSuchStore` naming it, instead of creating an empty store there."""
    path = Path(db or default_db_path())
    if not create and not path.exists():
        raise NoSuchStore(
            f"{path}: no such store; `creditlens init --db {path}` creates one with the bundled runs, "
            f"`creditlens import PATH --db {path} --run NAME` one with your run"
        )
    wait = float(os.environ.get("CREDITLENS_LOCK_WAIT", "30"))
    return StoreHandle(path, wait_seconds=wait)


def open_store(db: Path | None, read_only: bool = False, create: bool = False):
    """A read or write connection to the store of one command (see `store_handle`)."""
    handle = store_handle(db, create=create)
    return handle.read() if read_only else handle.write()
