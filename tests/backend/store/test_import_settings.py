"""DuckDB's size settings an import changes for its own length (the buffer pool, the write-ahead log's
checkpoint size): set while it runs, and the checkpoint size as it was after it, whether it succeeds or fails
(the memory limit comes back as DuckDB's own text of it, which reads back a little lower: not compared)."""

from __future__ import annotations

import pytest

from backend.core.errors import InputError
from backend.ingest import import_records
from backend.ingest.pipeline import IMPORT_MEMORY_LIMIT
from backend.store import Store
from tests.conftest import make_records


def _setting(store: Store, name: str) -> str:
    return store.con.execute(f"SELECT current_setting('{name}')").fetchall()[0][0]


def test_the_checkpoint_size_is_set_for_a_while_then_as_it_was(store):
    before = _setting(store, "checkpoint_threshold")
    with store.checkpoint_threshold("256MB"):
        assert _setting(store, "checkpoint_threshold") != before
        assert _setting(store, "checkpoint_threshold").startswith("244.1 MiB")  # 256e6 bytes
    assert _setting(store, "checkpoint_threshold") == before
    with pytest.raises(ValueError, match="checkpoint threshold 'lots'"):
        with store.checkpoint_threshold("lots"):
            pass


def test_an_import_checkpoints_at_its_memory_limit_and_leaves_the_settings_as_they_were(store, monkeypatch):
    seen = []
    insert = Store.insert_arrow

    def watched(self, table, data):
        seen.append((_setting(self, "checkpoint_threshold"), _setting(self, "memory_limit")))  # both 256MB
        return insert(self, table, data)

    monkeypatch.setattr(Store, "insert_arrow", watched)
    before = _setting(store, "checkpoint_threshold")
    import_records(store, "r", make_records(n_groups=2), content_key="r")
    assert seen and set(seen) == {(_setting_text(store, IMPORT_MEMORY_LIMIT),) * 2}
    assert _setting(store, "checkpoint_threshold") == before
    bad = make_records(n_groups=1)
    bad[1]["token_ids"] = "not a list"
    with pytest.raises(InputError):
        import_records(store, "bad", bad)
    assert _setting(store, "checkpoint_threshold") == before


def _setting_text(store: Store, size: str) -> str:
    """How DuckDB writes `size` back (e.g. '244.1 MiB' for 256MB)."""
    with store.checkpoint_threshold(size):
        return _setting(store, "checkpoint_threshold")
