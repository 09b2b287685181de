"""The app's own saves keep the cached reads; another process's commit drops them at the next rerun, even
when an own save follows it before any rerun looked (the concurrent-import browser test met this)."""

from __future__ import annotations

from app import data
from backend.ingest import import_records
from backend.store import StoreHandle
from tests.conftest import make_records


def _save(handle) -> None:
    with handle.write() as store:
        store.con.execute("CREATE TABLE IF NOT EXISTS scratch (x INTEGER)")
        store.con.execute("INSERT INTO scratch VALUES (1)")


def test_own_writes_are_seen_and_a_foreign_commit_before_one_is_not_lost(tmp_path):
    path = str(tmp_path / "runs.duckdb")
    own = data.OwnWritesHandle(path)
    data.refresh_if_store_changed(path)  # a rerun looked at the store
    _save(own)
    assert not data.refresh_if_store_changed(path)  # the app's own save: caches kept

    with StoreHandle(path).write() as store:  # `creditlens import` in a terminal commits a run...
        import_records(store, "late", make_records(n_groups=1, group_size=2))
    _save(own)  # ...and a session saves an estimate before any rerun looked
    assert data.refresh_if_store_changed(path)  # the import still drops the cached reads
    assert not data.refresh_if_store_changed(path)
