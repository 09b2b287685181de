"""The app's store access and cached loaders.

The store is a `StoreHandle` (a path, one per process via `st.cache_resource`): every loader opens a
short-lived read connection, so `creditlens import` in another terminal is never locked out by the
server. Loaders are `st.cache_data` functions keyed on small hashable arguments (db path, run,
rollout or group id, estimator name, config as a tuple of items); anything that writes to the store
calls `invalidate()` afterwards.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import streamlit as st

from app import access, keys
from backend.core.errors import InputError
from backend.credit import as_trained
from backend.credit import token_classes as classes
from backend.demo.bundled import import_bundled
from backend.store import StoreHandle, checkpoints, default_db_path
from backend.store.model_credit_queries import model_credit_rows


def db_path_from_argv(argv: list[str] | None = None) -> Path:
    """`--db PATH` after `--` on the `streamlit run` command line, else $CREDITLENS_DB, else the default."""
    argv = list(sys.argv if argv is None else argv)
    for i, arg in enumerate(argv):
        if arg == "--db" and i + 1 < len(argv):
            return Path(argv[i + 1])
        if arg.startswith("--db="):
            return Path(arg.split("=", 1)[1])
    return Path(os.environ.get("CREDITLENS_DB") or default_db_path())


class OwnWritesHandle(StoreHandle):
    """A `StoreHandle` that notes the store's version after each write of this process (a view saving an
    estimate it computed at step or run scope, the Explorer's credit summaries), so that
    `refresh_if_store_changed` reads only other processes' writes as a change: an own save dropped every
    cached read of every session at the next rerun. Writes that change what views show call
    `invalidate()` (import, delete, main channel, token classes) or go through `handle_for` (model jobs)."""

    @contextmanager
    def write(self) -> Iterator:
        key = str(self.path)
        with super().write() as store:
            before = store_version(key)  # while this write holds the file, no other process can commit
            yield store
        # Only a store that no one else changed since the last rerun looked is marked as seen: when another
        # process (an import in a terminal) committed in between, that change must still drop the caches at
        # the next rerun. What stays open is the instant between this close and the stat below.
        if _seen_versions.get(key) == before:
            _seen_versions[key] = store_version(key)


@st.cache_resource(show_spinner=False)
def store_handle(path: str) -> StoreHandle:
    """One handle per process and store file; imports the bundled runs into an empty store."""
    handle = OwnWritesHandle(path)
    with handle.read() as store:
        empty = not store.list_runs()
    if empty and not settings().read_only:
        with handle.write() as store:
            import_bundled(store, quiet=True)
    return handle


def db_path() -> str:
    return str(st.session_state.get(keys.DB) or db_path_from_argv())


def handle() -> StoreHandle:
    return store_handle(db_path())


def settings() -> access.Settings:
    """This server's access settings (token, read-only mode, import roots, job limits)."""
    return access.settings(db_path())


@st.cache_data(show_spinner=False)
def list_runs(path: str) -> list[dict]:
    with store_handle(path).read() as store:
        return store.list_runs()


@st.cache_data(show_spinner=False)
def rollout_index(path: str, run: str) -> pd.DataFrame:
    with store_handle(path).read() as store:
        return store.rollout_index(run)


@st.cache_data(show_spinner=False)
def rollout(path: str, run: str, rollout_id: int) -> dict:
    with store_handle(path).read() as store:
        return store.rollout(run, rollout_id)


@st.cache_data(show_spinner=False, max_entries=32)
def group_batch(path: str, run: str, group_id: int):
    """The `RolloutBatch` of one group (every estimator is independent per group)."""
    with store_handle(path).read() as store:
        return store.load_batch(run, group_ids=[group_id])


@st.cache_data(show_spinner=False, max_entries=8)
def groups_batch(path: str, run: str, group_ids: tuple[int, ...]):
    with store_handle(path).read() as store:
        return store.load_batch(run, group_ids=list(group_ids))


@st.cache_data(show_spinner=False, max_entries=4)
def run_batch(path: str, run: str):
    """The whole run as one batch (oracle metrics over a synthetic run)."""
    with store_handle(path).read() as store:
        return store.load_batch(run)


@st.cache_data(show_spinner=False)
def run_info(path: str, run: str) -> dict:
    with store_handle(path).read() as store:
        return store.run_info(run)


@st.cache_data(show_spinner=False)
def rollout_model(path: str, run: str, rollout_id: int) -> tuple[dict | None, str | None]:
    """The model the model jobs use for this rollout (`backend.store.checkpoints.rollout_model`: its step's
    checkpoint): ({model, on_policy, why, label}, None), or (None, why none can be chosen)."""
    with store_handle(path).read() as store:
        try:
            choice = checkpoints.rollout_model(store, run, rollout_id)
        except InputError as exc:
            return None, str(exc)
    return {**choice.to_json(), "label": choice.label}, None


@st.cache_data(show_spinner=False)
def run_channels(path: str, run: str) -> list[str]:
    """The run's scored channels (what `creditlens runs` lists)."""
    return next((r["channels"] for r in list_runs(path) if r["name"] == run), [])


WHAT_IF_ESTIMATOR = as_trained.WHAT_IF_DEFAULT
"""The estimator of Credit Lens's recombination where a view weighs it (Tune): a what-if on any run."""


@st.cache_data(show_spinner=False)
def run_recipe(path: str, run: str) -> as_trained.Recipe | None:
    """How the run's trainer made its advantage (`as_trained.recipe`), None for a run no known trainer
    made."""
    return as_trained.run_recipe(store_handle(path), run)


def default_estimator(path: str, run: str | None) -> str:
    """The credit a view opens on: the trainer's own on a run a trainer made, else grpo."""
    found = run_recipe(path, run) if run is not None else None
    return found.estimator if found is not None else as_trained.WHAT_IF_DEFAULT


def credit_note(path: str, run: str | None, estimator: str) -> str:
    """`as_trained.credit_note` for the run: the trainer's credit or the what-if, with each β's source."""
    if run is None:
        return ""
    found = run_recipe(path, run)
    return as_trained.credit_note(estimator, found, [*run_channels(path, run), "kl"])


@st.cache_data(show_spinner=False)
def main_channel(path: str, run: str) -> str:
    """The run's main channel (what `creditlens runs` lists; `task` for a run the store does not know)."""
    return next((r["main_channel"] for r in list_runs(path) if r["name"] == run), "task")


@st.cache_data(show_spinner=False)
def token_classes(path: str, run: str) -> tuple:
    """The run's token classes (its own, saved in the store, else the defaults)."""
    with store_handle(path).read() as store:
        return classes.from_json(store.run_info(run)["meta"].get("token_classes"))


@st.cache_data(show_spinner=False)
def step_channel_means(path: str, run: str) -> pd.DataFrame:
    with store_handle(path).read() as store:
        return store.step_channel_means(run)


@st.cache_data(show_spinner=False)
def resample_values(path: str, run: str, rollout_id: int | None) -> pd.DataFrame:
    with store_handle(path).read() as store:
        return store.resample_values(run, rollout_id)


@st.cache_data(show_spinner=False)
def resample_samples(path: str, run: str, rollout_id: int) -> pd.DataFrame:
    with store_handle(path).read() as store:
        return store.resample_samples(run, rollout_id)


@st.cache_data(show_spinner=False)
def model_credit(path: str, run: str, rollout_id: int) -> pd.DataFrame:
    """The rollout's cached model-credit scores (one row per method)."""
    with store_handle(path).read() as store:
        return model_credit_rows(store, run, rollout_id)


_REMEMBERED: set[tuple[str, tuple]] = set()  # (kind, key) of results known to be in st.cache_data


def remember(kind: str, key: tuple) -> None:
    """Note that the `kind` result for `key` is now in the server's cache (for every session)."""
    _REMEMBERED.add((kind, key))


def remembered(kind: str, key: tuple) -> bool:
    """Whether `remember(kind, key)` was called since the last `invalidate` (an entry evicted from a
    bounded cache reads as still there: the caller only waits longer for it)."""
    return (kind, key) in _REMEMBERED


def invalidate() -> None:
    """After a write (import, delete, resample): drop every cached read."""
    st.cache_data.clear()
    _REMEMBERED.clear()


def store_version(path: str) -> tuple:
    """Changes whenever any process commits to the store: the stat of the file and of its WAL (no
    connection needed, so it is cheap enough for every rerun)."""
    version = []
    for file in (path, path + ".wal"):
        try:
            info = os.stat(file)
            version.append((info.st_mtime_ns, info.st_size))
        except FileNotFoundError:
            version.append(None)
    return tuple(version)


_seen_versions: dict[str, tuple] = {}


def refresh_if_store_changed(path: str) -> bool:
    """Drop the cached reads when another process (e.g. `creditlens import` in a terminal) changed
    the store since the last rerun of any session; returns whether it did."""
    version = store_version(path)
    previous = _seen_versions.get(path)
    _seen_versions[path] = version
    if previous is not None and previous != version:
        invalidate()
        return True
    return False


def handle_for(path: str) -> StoreHandle:
    """The handle a model job (resample, teacher, model credit) writes through from its worker thread: a
    plain `StoreHandle`, not the app's `OwnWritesHandle`, so what the job saves reads as a change of the
    store at the next rerun and drops the cached reads, as another process's import does."""
    return StoreHandle(path)
