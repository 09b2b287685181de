"""Streamed whole-run estimates (backend.core.chunks, estimates.stream_run) equal the in-memory path for every
registered estimator, on the bundled demo, oracle and agent runs and on a run whose groups interleave, with
chunk sizes that cut across groups and steps; each chunk's tensors stay within a bound set by the chunk
size."""

from __future__ import annotations

import gc
import random
import tempfile
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from backend.core import chunks
from backend.credit import estimates
from backend.estimators import fitting, registry
from backend.ingest import import_records
from backend.store import Store, StoreHandle
from tests.conftest import copy_store, make_records, reads_share_one_instance, run_cli_here


@pytest.fixture(scope="module")
def db(bundled_template, tmp_path_factory) -> Path:
    path = copy_store(bundled_template, tmp_path_factory.mktemp("stream") / "runs.duckdb")
    records = make_records(n_groups=4, group_size=3, seed=5, steps=3)
    random.Random(0).shuffle(records)  # groups interleave: chunks must read by group, not by id range alone
    with Store(path) as store:
        import_records(store, "mixed", records)
    return path


def _supported(db: Path, run: str) -> list[str]:
    with Store(db, read_only=True) as store:
        batch = store.load_batch(run)
    return registry.supported(batch)


def _streamed(handle: StoreHandle, run: str, name: str, chunk: int) -> tuple[dict, int]:
    out, largest = {}, 0
    streamed = estimates.stream_run(handle, run, name, chunk_rollouts=chunk, use_cache=False, save=False)
    for batch, adv in streamed:
        out.update(estimates._per_rollout(batch, adv))
        largest = max(largest, batch.B)
    return out, largest


def _group_sizes(db: Path, run: str) -> tuple[int, int]:
    with Store(db, read_only=True) as store:
        index = store.rollout_keys(run)
    return int(index.groupby("group_id").size().max()), int(index.groupby("step").size().max())


# Rollouts per chunk, with boundaries inside steps and chunks that span steps. demo: 448 rollouts in 56
# groups of 8, 14 a step; 97 packs 13 groups (4 chunks of 104 rollouts, the bound chunk + group - 1 exactly,
# then 32). oracle: 192 in 24 groups of 8, 5 chunks. mixed: 36 in 12 interleaved groups of 3 (every chunk
# read by an id range and a group list): 5 packs 2 groups (6 chunks, 6 > 5) and 13 packs 5 (3 chunks), most
# of them holding groups of two steps. agent: 72 multi-turn rollouts in 12 groups of 6 with untrained tool
# tokens (the mask and turns must travel with every chunk): 17 packs 3 groups. No size divides a group. One
# size for run scope (fitting is slow).
SIZES = {"demo": (97,), "oracle": (37,), "mixed": (5, 13), "agent": (17,)}


@pytest.mark.slow
@pytest.mark.parametrize("run", ["demo", "oracle", "mixed", "agent"])
def test_every_estimator_streams_to_the_in_memory_numbers(db, run):
    with reads_share_one_instance(db):  # nothing here writes (save=False); half the test's CPU otherwise
        _streams_to_the_in_memory_numbers(db, run)


def _streams_to_the_in_memory_numbers(db: Path, run: str) -> None:
    handle = StoreHandle(db)
    names = _supported(db, run)
    if run == "demo":
        assert {"grpo", "gae", "entropy", "prefix_tree", "token_rm", "suffix_mc"} <= set(names)
    group_max, step_max = _group_sizes(db, run)
    for name in names:
        if run != "mixed" and registry.get(name).scope_for(registry.make_config(name)) == "run":
            continue  # one chunk, the in-memory code path: checked on the small run alone (fitting is slow)
        whole = estimates.estimate_rollouts(
            handle, run, name, use_cache=False, save=False, chunk_rollouts=None
        )
        scope = whole.scope
        sizes = SIZES[run]
        for chunk in sizes if scope != "run" else sizes[:1]:
            got, largest = _streamed(handle, run, name, chunk)
            assert got.keys() == whole.advantages.keys(), (name, chunk)
            for rid, expected in whole.advantages.items():
                np.testing.assert_allclose(got[rid], expected, rtol=1e-5, atol=1e-6, err_msg=f"{name} {rid}")
            # Bounded memory, checked without timing: a chunk holds whole groups up to `chunk` rollouts
            # (group scope, and run scope fitted in two passes over groups) or one step (step scope); only
            # the rest of run scope reads the run at once.
            spec, config = registry.get(name), registry.make_config(name)
            if scope == "run" and fitting.chunk_scope(spec, config) == "group":
                scope = "group"
            bound = {"group": chunk + group_max - 1, "step": step_max, "run": len(got)}[scope]
            assert largest <= bound, (name, scope, largest, bound)


def test_chunks_keep_groups_and_steps_whole_and_cover_the_run(db):
    with Store(db, read_only=True) as store:
        index = store.rollout_keys("mixed")
    for scope, key in (("group", "group_id"), ("step", "step")):
        plan = chunks.plan(index, scope, chunk_rollouts=4)
        seen = []
        with Store(db, read_only=True) as store:
            for chunk in plan:
                batch = store.load_batch("mixed", fields=(), **chunk.load_args())
                assert batch.B == chunk.rollouts
                seen += batch.rollout_ids.tolist()
                keys = set(index.set_index("rollout_id").loc[batch.rollout_ids.tolist(), key])
                others = index[index[key].isin(keys) & ~index["rollout_id"].isin(batch.rollout_ids.tolist())]
                assert others.empty, f"{scope} split across chunks"
        assert sorted(seen) == sorted(index["rollout_id"].tolist())
    with pytest.raises(ValueError, match="at least 1"):
        chunks.plan(index, "group", chunk_rollouts=0)


def test_cli_streamed_output_and_cache_equal_the_in_memory_file(db, tmp_path):
    args = ["estimate", "--db", str(db), "--run", "demo", "--estimator", "grpo", "--no-cache"]
    assert run_cli_here(*args, "--chunk", "none", "--out", str(tmp_path / "memory.parquet")).returncode == 0
    assert run_cli_here(*args, "--chunk", "11", "--out", str(tmp_path / "streamed.parquet")).returncode == 0
    memory = pq.read_table(tmp_path / "memory.parquet").to_pandas().sort_values(["rollout_id", "pos"])
    streamed = pq.read_table(tmp_path / "streamed.parquet").to_pandas().sort_values(["rollout_id", "pos"])
    assert len(memory) > 0
    assert memory.reset_index(drop=True).equals(streamed.reset_index(drop=True))
    # the streamed run saved its outputs: the next call reads them back chunk by chunk
    handle = StoreHandle(db)
    cached = estimates.stream_run(handle, "demo", "grpo", chunk_rollouts=11)
    assert cached.how == "cache"
    got = {}
    for batch, adv in cached:
        got.update(estimates._per_rollout(batch, adv))
    for rid, part in memory.groupby("rollout_id"):
        np.testing.assert_array_equal(got[rid], part["advantage"].to_numpy())


def test_the_estimate_command_leaves_the_garbage_collector_as_it_found_it(db, tmp_path):
    """`creditlens estimate` turns the collector off for its imports and freezes their objects for the
    command; called in-process, it leaves the collector on and nothing frozen."""
    args = [
        "estimate",
        "--db",
        str(db),
        "--run",
        "demo",
        "--estimator",
        "grpo",
        "--out",
        tmp_path / "a.parquet",
    ]
    assert run_cli_here(*args).returncode == 0
    assert gc.isenabled()
    assert gc.get_freeze_count() == 0


def test_a_streamed_estimate_saves_the_whole_run_in_one_go_or_nothing(db, tmp_path, monkeypatch):
    """Outputs wait in a staged Parquet file (no memory per token) until the last chunk: a caller that
    stops early leaves the cache as it was; a finished run is cached whole, and the stage is removed."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    handle = StoreHandle(db)
    config = registry.make_config("grpo", channel="task")
    key = ("grpo", registry.config_hash("grpo", config), "task")
    with Store(db, read_only=True) as store:
        total = len(store.rollout_keys("mixed"))
        assert store.cached_rollouts("mixed", *key) == 0

    stream = iter(estimates.stream_run(handle, "mixed", "grpo", config, chunk_rollouts=4, use_cache=False))
    next(stream)
    next(stream)
    assert list(tmp_path.glob("creditlens-stage-*/estimates.parquet"))  # staged as it goes
    stream.close()  # the caller stops after two chunks
    with Store(db, read_only=True) as store:
        assert store.cached_rollouts("mixed", *key) == 0
    assert not list(tmp_path.glob("creditlens-stage-*"))

    computed = {}
    whole = estimates.stream_run(handle, "mixed", "grpo", config, chunk_rollouts=4, use_cache=False)
    for batch, adv in whole:
        computed.update(estimates._per_rollout(batch, adv))
    assert len(computed) == total and not list(tmp_path.glob("creditlens-stage-*"))
    with Store(db, read_only=True) as store:
        cached = store.cached_estimate("mixed", *key)
    assert cached.keys() == computed.keys()
    for rid, values in computed.items():
        np.testing.assert_array_equal(cached[rid], values)
