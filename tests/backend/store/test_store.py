"""The store on real DuckDB files: migrations, runs, batches, caches, resampling rows."""

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
import torch

import backend.store
from backend.core.errors import InputError, StoreError
from backend.ingest import import_records
from backend.store import Store, StoreHandle, pad_list_array
from tests.conftest import make_records, snapshot


def test_migrations_are_recorded_once(db_path):
    with Store(db_path) as store:
        versions = store.con.execute("SELECT version FROM schema_migrations ORDER BY 1").fetchall()
        assert versions[:7] == [(1,), (2,), (3,), (4,), (5,), (6,), (7,)]  # 007: the run's main channel
    with Store(db_path) as store:  # reopening applies nothing twice
        assert store.migrate() == []
        assert store.con.execute("SELECT count(*) FROM schema_migrations").fetchall() == [(len(versions),)]


def test_a_version_1_store_is_upgraded_in_place(db_path):
    sql = (Path(backend.store.__file__).parent / "migrations" / "001_initial.sql").read_text()
    con = duckdb.connect(str(db_path))
    con.execute(
        "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name VARCHAR, "
        "applied_at TIMESTAMP DEFAULT current_timestamp)"
    )
    for statement in sql.split(";"):
        if statement.strip() and not all(
            line.strip().startswith("--") or not line.strip() for line in statement.splitlines()
        ):
            con.execute(statement)
    con.execute("INSERT INTO schema_migrations (version, name) VALUES (1, 'initial')")
    con.execute("INSERT INTO runs (run_id, name, source) VALUES (1, 'old', 'v1')")
    con.close()
    with Store(db_path) as store:
        assert [r["name"] for r in store.list_runs()] == ["old"]  # existing runs are ready
        import_records(store, "new", make_records(n_groups=1))
        assert [r["name"] for r in store.list_runs()] == ["old", "new"]


def test_a_read_only_open_migrates_a_store_written_by_an_older_version(db_path):
    """A store made before the last migration (agent turns, 012) is read by read-only commands as it is
    after the upgrade: the read-only open migrates it once, as a writer, first."""
    with Store(db_path) as store:
        import_records(store, "r", make_records(n_groups=1))
    con = duckdb.connect(str(db_path))  # undo 012 as an older Credit Lens left the store
    for column in ("loss_mask", "turns", "turn_rewards"):
        con.execute(f"ALTER TABLE rollouts DROP COLUMN {column}")
    con.execute("DELETE FROM schema_migrations WHERE version = 12")
    con.close()
    with Store(db_path, read_only=True) as store:
        assert [r["name"] for r in store.list_runs()] == ["r"]
        assert store.con.execute("SELECT max(version) FROM schema_migrations").fetchone()[0] >= 12
        assert store.con.execute("SELECT count(loss_mask IS NULL) FROM rollouts").fetchone()[0] > 0


def test_a_failed_import_leaves_no_staging_rows(store):
    bad = make_records(n_groups=2) + [{"prompt": "p"}]
    before = snapshot(store)
    with pytest.raises(InputError):
        import_records(store, "r", bad)
    assert snapshot(store) == before


def test_an_abandoned_staging_run_is_invisible_then_discarded(db_path):
    with Store(db_path) as store:
        import_records(store, "keep", make_records(n_groups=1))
        before = snapshot(store)
        with store.transaction():  # what a process killed mid-import leaves behind
            dead = store.create_run(f"{Store.STAGING_PREFIX}999999999/x", "killed", status="importing")
            store.con.execute(
                "INSERT INTO rollouts (run_id, rollout_id, group_id, step, token_ids) "
                "VALUES (?, 0, 0, 0, [1, 2])",
                [dead],
            )
        assert [r["name"] for r in store.list_runs()] == ["keep"]
        with pytest.raises(StoreError):
            store.run_id(f"{Store.STAGING_PREFIX}999999999/x")
    with Store(db_path) as store:  # the next writer cleans up
        assert snapshot(store) == before


def test_reserved_run_names_are_refused(store):
    with pytest.raises(InputError, match="reserved"):
        import_records(store, Store.STAGING_PREFIX + "x", make_records(n_groups=1))


def test_load_batch_round_trips_records(store):
    records = make_records(n_groups=2, group_size=3, seed=1)
    import_records(store, "r", records)
    batch = store.load_batch("r")
    assert batch.B == 6
    for i, rec in enumerate(records):
        L = len(rec["token_ids"])
        assert batch.lengths[i] == L
        assert batch.token_ids[i, :L].tolist() == rec["token_ids"]
        assert torch.allclose(batch.logprobs[i, :L], torch.tensor(rec["logprobs"]))
        assert batch.tokens[i] == rec["tokens"]
        assert batch.scores["task"][i] == rec["rewards"]["task"]
        assert batch.token_rewards["style"][i, L - 1] == -1.0
        # padding is exactly zero in every per-token tensor
        assert not batch.response_mask[i, L:].any()
        assert (batch.entropies[i, L:] == 0).all()
    assert batch.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    assert batch.ref_logprobs is None  # absent fields stay absent


def test_load_batch_filters_by_group_and_rollout(store):
    import_records(store, "r", make_records(n_groups=3, group_size=2))
    assert store.load_batch("r", group_ids=[2]).rollout_ids.tolist() == [4, 5]
    assert store.load_batch("r", rollout_ids=[1, 3]).rollout_ids.tolist() == [1, 3]


def test_load_batch_loads_only_the_fields_asked_for(store):
    import_records(store, "r", make_records(n_groups=2, group_size=3, seed=1))
    full = store.load_batch("r")
    lean = store.load_batch("r", fields=("entropies",), id_range=(1, 4))
    assert lean.rollout_ids.tolist() == [1, 2, 3, 4]
    assert lean.logprobs is None and lean.tokens is None and lean.token_rewards == {}
    assert torch.equal(lean.entropies, full.entropies[1:5, : lean.T])
    assert torch.equal(lean.scores["task"], full.scores["task"][1:5])
    # the range pre-filter composes with the other filters and loses nothing they select
    assert store.load_batch("r", group_ids=[1], id_range=(0, 5)).rollout_ids.tolist() == [3, 4, 5]


def test_run_tables_are_every_table_with_a_run_id(store):
    tables = {
        r[0]
        for r in store.con.execute(
            "SELECT DISTINCT table_name FROM information_schema.columns WHERE column_name = 'run_id'"
        ).fetchall()
    }
    assert set(backend.store.db.RUN_TABLES) == tables
    assert backend.store.db.RUN_TABLES[-1] == "runs"  # deleted last: the other rows point at it


def test_unknown_run_names_the_known_ones(store):
    import_records(store, "alpha", make_records(n_groups=1))
    with pytest.raises(StoreError, match="no run named 'beta'.*alpha"):
        store.load_batch("beta")


def test_delete_run_removes_everything(store):
    import_records(store, "a", make_records())
    import_records(store, "b", make_records(seed=3))
    store.delete_run("a")
    assert [r["name"] for r in store.list_runs()] == ["b"]
    for table in ("rollouts", "scores", "token_rewards", "groups"):
        assert store.con.execute(f"SELECT count(*) FROM {table} WHERE run_id = 1").fetchall() == [(0,)]


def test_list_runs_summary(store):
    records = make_records(n_groups=2, group_size=4, steps=2)
    import_records(store, "r", records)
    (summary,) = store.list_runs()
    assert summary["rollouts"] == 16 and summary["groups"] == 4 and summary["steps"] == 2
    assert summary["tokens"] == sum(len(r["token_ids"]) for r in records)
    assert summary["channels"] == ["style", "task"]


def test_resample_rows_feed_mc_values(store):
    import_records(store, "r", make_records(n_groups=1, group_size=2, seed=5))
    samples = pd.DataFrame(
        {
            "pos": [0, 0, 0, 1],
            "sample_idx": [0, 1, 2, 0],
            "seed": [1, 2, 3, 4],
            "suffix_ids": [[1, 2], [3], [4], [5]],
            "suffix_text": ["a", "b", "c", "d"],
            "reward": [1.0, 0.0, 1.0, 0.0],
            "engine": ["transformers"] * 4,
            "model": ["m"] * 4,
        }
    )
    assert store.save_resample("r", 1, samples) == 4
    values = store.resample_values("r", 1)
    assert values["n"].tolist() == [3, 1]
    assert values["value"].tolist() == pytest.approx([2 / 3, 0.0])
    assert values["stderr"].iloc[0] == pytest.approx(np.std([1, 0, 1], ddof=1) / np.sqrt(3))
    batch = store.load_batch("r")
    assert batch.extras["mc_mask"][1].tolist()[:2] == [1.0, 1.0]
    assert batch.extras["mc_values"][1, 0] == pytest.approx(2 / 3)
    assert batch.extras["mc_mask"][0].sum() == 0


def test_estimate_cache_round_trip(store):
    import_records(store, "r", make_records(n_groups=1, group_size=2))
    adv = {0: np.array([0.5, -1.0], np.float32), 1: np.array([2.0], np.float32)}
    store.save_estimate("r", "grpo", "abc", {"epsilon": 1e-6}, "task", adv)
    store.save_estimate("r", "grpo", "abc", {"epsilon": 1e-6}, "task", adv)  # replaces, not duplicates
    got = store.cached_estimate("r", "grpo", "abc", "task")
    assert set(got) == {0, 1} and got[0].tolist() == [0.5, -1.0]
    assert store.cached_estimate("r", "grpo", "other", "task") == {}


def test_update_token_arrays_is_atomic_per_call(store):
    import_records(store, "r", make_records(n_groups=1, group_size=2, seed=2))
    store.update_token_arrays("r", {0: {"ref_logprobs": [-1.0] * len(store.rollout("r", 0)["token_ids"])}})
    assert store.rollout("r", 0)["ref_logprobs"][0] == -1.0
    assert store.rollout("r", 1)["ref_logprobs"] is None


def test_pad_list_array_truncates_and_zero_pads():
    arr = pa.array([[1.0, 2.0, 3.0], [], None, [4.0]], pa.list_(pa.float32()))
    out = pad_list_array(arr, 2, np.float32)
    assert out.tolist() == [[1.0, 2.0], [0.0, 0.0], [0.0, 0.0], [4.0, 0.0]]


def test_read_only_open_of_missing_store_is_a_clear_error(tmp_path):
    with pytest.raises(StoreError, match="no such store"):
        Store(tmp_path / "missing.duckdb", read_only=True)


def test_handle_reads_and_writes(db_path):
    handle = StoreHandle(db_path)
    with handle.write() as store:
        import_records(store, "r", make_records(n_groups=1))
    with handle.read() as store:
        assert store.list_runs()[0]["name"] == "r"


@pytest.mark.parametrize("first", ["write", "read"])
def test_a_thread_waits_while_another_thread_has_the_store_open_the_other_way(tmp_path, first):
    """DuckDB refuses, within one process, a read-only open while a write connection is open (and the other
    way round); the app's threads (a session saving an estimate, another reading) wait it out."""
    import threading  # noqa: PLC0415 - this test only

    handle = StoreHandle(tmp_path / "s.duckdb", wait_seconds=10)
    opened, release = threading.Event(), threading.Event()

    def hold():
        with getattr(handle, first)():
            opened.set()
            release.wait(5)

    holder = threading.Thread(target=hold)
    holder.start()
    assert opened.wait(5)
    with pytest.raises(StoreError, match="different configuration"):  # what DuckDB does without the wait
        Store(handle.path, read_only=first == "write").close()
    threading.Timer(0.3, release.set).start()
    other = handle.read if first == "write" else handle.write
    with other() as store:  # opens once the holder closes
        assert store.list_runs() == []
    holder.join()

    short = StoreHandle(handle.path, wait_seconds=0.2)
    release.clear()
    holder = threading.Thread(target=hold)
    opened.clear()
    holder.start()
    assert opened.wait(5)
    with pytest.raises(StoreError, match="another thread of this process"):
        with (short.read if first == "write" else short.write)():
            pass
    release.set()
    holder.join()


def test_two_threads_writing_the_same_rows_take_turns(tmp_path):
    """The warm-up and a user's first page may save the same summary at once: two threads replacing the same
    rows in one process must not fail with DuckDB's "Conflict on tuple deletion"."""
    import threading  # noqa: PLC0415 - this test only

    handle = StoreHandle(tmp_path / "s.duckdb")
    with handle.write() as store:
        store.con.execute("CREATE TABLE scratch (k INTEGER, v INTEGER)")
        store.con.execute("INSERT INTO scratch SELECT range, 0 FROM range(200)")
    errors = []

    def replace_rows(value: int) -> None:
        try:
            for _ in range(40):
                with handle.write() as store:
                    store.con.execute("BEGIN TRANSACTION")
                    store.con.execute("DELETE FROM scratch")
                    store.con.execute("INSERT INTO scratch SELECT range, ? FROM range(200)", [value])
                    store.con.execute("COMMIT")
        except Exception as exc:  # the conflict surfaces here without turns
            errors.append(exc)

    threads = [threading.Thread(target=replace_rows, args=(v,)) for v in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with handle.read() as store:
        assert store.con.execute("SELECT count(*), count(DISTINCT v) FROM scratch").fetchone() == (200, 1)


def test_reads_inside_kept_open_share_one_connection_that_writes_close(tmp_path):
    """`kept_open`: the reads of one thread share one read-only connection until the block ends; a write of
    this process, on this thread or another, closes it first instead of waiting for the block (a short
    wait here: a kept connection left open would make each write below time out), and reads after the
    write see it."""
    import threading  # noqa: PLC0415 - this test only

    handle = StoreHandle(tmp_path / "s.duckdb", wait_seconds=0.5)
    with handle.read() as first, handle.read() as second:
        assert first is not second  # outside a block: a connection per read
    with handle.kept_open():
        with handle.read() as first:
            pass
        with handle.read() as again, handle.kept_open():  # a nested block is the outer one
            assert again is first
            with handle.read() as inner:
                assert inner is first
        with handle.write() as store:  # this thread's write
            import_records(store, "here", make_records(n_groups=1, group_size=2))
        with handle.read() as store:
            assert store is not first and [r["name"] for r in store.list_runs()] == ["here"]

        def write_elsewhere():
            with handle.write() as other:
                import_records(other, "there", make_records(n_groups=1, group_size=2))

        writer = threading.Thread(target=write_elsewhere)
        writer.start()
        writer.join()
        with handle.read() as store:
            assert sorted(r["name"] for r in store.list_runs()) == ["here", "there"]
    Store(handle.path).close()  # the block closed its connection: a write connection opens at once


def test_a_transaction_inside_another_joins_it(db_path):
    """A nested `transaction()` commits or rolls back with the outer one (a streamed estimate saves its
    outputs and credit summaries in one commit)."""
    with Store(db_path) as store:
        store.con.execute("CREATE TABLE t (x INTEGER)")
        with store.transaction(), store.transaction() as con:
            con.execute("INSERT INTO t VALUES (1)")
        with pytest.raises(RuntimeError), store.transaction():
            with store.transaction() as con:
                con.execute("INSERT INTO t VALUES (2)")
            raise RuntimeError("after the inner block: the outer rolls both back")
        with pytest.raises(RuntimeError), store.transaction() as con:
            con.execute("INSERT INTO t VALUES (3)")
            with store.transaction():
                raise RuntimeError("inside the inner block")
        with store.transaction() as con:  # the connection is usable again
            con.execute("INSERT INTO t VALUES (4)")
        assert [r[0] for r in store.con.execute("SELECT x FROM t ORDER BY x").fetchall()] == [1, 4]
