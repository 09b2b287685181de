"""The stored repetition score against a loop over each response's windows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from backend.ingest import import_records
from backend.store.explorer_queries import WINDOW, _repetition


def _loop_repetition(ids: list[int] | None) -> float | None:
    """Share of the windows equal to an earlier window of the same list (None under WINDOW tokens)."""
    if ids is None or len(ids) < WINDOW:
        return None
    seen, repeats = set(), 0
    for start in range(len(ids) - WINDOW + 1):
        window = tuple(ids[start : start + WINDOW])
        repeats += window in seen
        seen.add(window)
    return repeats / (len(ids) - WINDOW + 1)


def _responses(seed: int) -> list[list[int] | None]:
    rng = np.random.default_rng(seed)
    lists: list[list[int] | None] = []
    for i in range(600):
        n = int(rng.integers(0, 200))
        ids = rng.integers(0, int(rng.choice([2, 50, 2**31 - 1])), n)
        if i % 3 == 0 and n:  # loops of every period, the policy's repetition
            ids = np.tile(ids[: int(rng.integers(1, 40))], n)[:n]
        lists.append(ids.tolist())
    lists[7] = None
    lists[8] = []
    return lists


@pytest.mark.parametrize("cells_per_sort", [1, 7, 256, 5000, 1 << 20])
def test_repetition_is_the_loop_over_windows(cells_per_sort):
    lists = _responses(seed=cells_per_sort)
    chunked = pa.chunked_array(
        [pa.array(lists[:250], pa.list_(pa.int32())), pa.array(lists[250:], pa.list_(pa.int32()))]
    )
    got = _repetition(chunked, cells_per_sort=cells_per_sort).to_pylist()
    want = [_loop_repetition(ids) for ids in lists]
    assert [g is None for g in got] == [w is None for w in want]
    assert np.allclose(
        [g for g in got if g is not None], [w for w in want if w is not None], rtol=0, atol=1e-12
    )
    assert sum(w is not None and w > 0 for w in want) > 100  # the loops are there


def test_no_window_at_all():
    assert _repetition(
        pa.chunked_array([pa.array([[1, 2], [], None], pa.list_(pa.int32()))])
    ).to_pylist() == [
        None,
        None,
        None,
    ]


def test_the_store_keeps_the_repetition_of_each_rollout(store):
    ids = [1, 2, 3, 4] * 10
    record = {"prompt": "p", "response": "r", "rewards": {"task": 1.0}, "token_ids": ids}
    import_records(store, "r", [record, {**record, "token_ids": list(range(40))}])
    stored = store.con.execute(
        "SELECT repetition FROM rollout_summary WHERE run_id = ? ORDER BY rollout_id", [store.run_id("r")]
    ).fetchall()
    assert [row[0] for row in stored] == [_loop_repetition(ids), 0.0]
