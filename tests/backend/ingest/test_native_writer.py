"""Native step files as recorders write them (`backend.ingest.native_writer`, `step_files`): what a folder of
them imports to, without a trainer (tests/integrations/test_trl_recorder.py runs the real one)."""

from __future__ import annotations

import numpy as np
import pytest

from backend.core.errors import InputError
from backend.ingest import import_path
from backend.ingest.native_writer import StepRecords, write_atomic
from backend.ingest.step_files import native_files, step_file_name
from backend.store import Store
from backend.store.checkpoint_queries import set_step_checkpoints, step_checkpoints


def _step(step: int, scores: list[float | None]) -> StepRecords:
    n = len(scores)
    ids = [np.arange(1, 2 + i) for i in range(n)]  # row i has i + 1 tokens
    return StepRecords(
        step=step,
        prompts=["p"] * n,
        responses=[f"r{i}" for i in range(n)],
        prompt_ids=[np.array([7, 8])] * n,
        token_ids=ids,
        rewards={"task": np.array([np.nan if s is None else s for s in scores])},
        groups=np.zeros(n, np.int64),
        per_token={"logprobs": [-np.ones(len(t), np.float32) for t in ids]},
        logged_advantage=np.linspace(-1, 1, n),
        meta=[{"checkpoint": None}] * n,
    )


def test_a_folder_of_step_files_imports_in_step_order_with_its_logged_advantage(tmp_path, db_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for step in (10, 2):  # step 10 sorts after step 2 (by number, not by name alone)
        table, dropped = _step(step, [1.0, None, 0.0]).table()
        assert dropped == 1 and table.num_rows == 2
        write_atomic(table, folder / step_file_name(step))
    assert [p.name for p in native_files(folder)] == ["step_000002.parquet", "step_000010.parquet"]
    assert step_file_name(3, part=1, rank=2) == "rank02_step_000003-1.parquet"
    assert not list(folder.glob(".*"))
    with Store(db_path) as store:
        report = import_path(store, folder, "rec")
        assert (report.format, report.records) == ("native", 4)
        rows = store.con.execute(
            "SELECT step, logged_advantage, len(logprobs) FROM rollouts ORDER BY rollout_id"
        ).fetchall()
        assert rows == [(2, -1.0, 1), (2, 1.0, 3), (10, -1.0, 1), (10, 1.0, 3)]
        # one of its files again: each file is keyed by its own content, so nothing is added twice
        again = import_path(store, folder / "step_000010.parquet", "rec")
        assert again.records == 0 and again.skipped == 2


def test_a_step_nobody_scored_writes_no_rows_and_bad_columns_are_named():
    table, dropped = _step(1, [None, None]).table()
    assert (table.num_rows, dropped) == (0, 2)
    records = _step(1, [1.0, 0.0])
    records.groups = np.zeros(3)
    with pytest.raises(ValueError, match="groups has 3 rows, token_ids has 2"):
        records.table()


def test_a_folder_without_native_step_files_is_no_native_folder(tmp_path, db_path):
    (tmp_path / "x.parquet").write_bytes(b"not parquet")
    assert native_files(tmp_path) == []
    with Store(db_path) as store, pytest.raises(InputError, match="no files of a known format"):
        import_path(store, tmp_path, "x")


def test_the_checkpoints_step_files_name_are_attached_relative_to_their_folder(tmp_path, db_path):
    """`meta.checkpoint` relative to the step file's folder resolves there (the recorder writes it so); an
    absolute one is kept; a name that is no folder attaches nothing; a step attached on purpose keeps its."""
    (tmp_path / "model").mkdir()
    (tmp_path / "elsewhere" / "ckpt-1").mkdir(parents=True)
    folder = tmp_path / "runs" / "rec"
    folder.mkdir(parents=True)
    named = {1: "../../model", 2: str(tmp_path / "elsewhere" / "ckpt-1"), 3: "step2", 4: None}
    for step, checkpoint in named.items():
        records = _step(step, [1.0, 0.0])
        records.meta = [{"checkpoint": checkpoint, "truncated": bool(i)} for i in range(2)]
        write_atomic(records.table()[0], folder / step_file_name(step))
    with Store(db_path) as store:
        report = import_path(store, folder, "rec")
        assert step_checkpoints(store, "rec") == {
            1: str((tmp_path / "model").resolve()),
            2: str((tmp_path / "elsewhere" / "ckpt-1").resolve()),
        }
        assert "step checkpoints named by the step files: 2 attached (steps 1, 2)" in report.notes
        set_step_checkpoints(store, "rec", {1: str(tmp_path / "elsewhere")})  # attached on purpose
        records = _step(5, [1.0, 0.0])
        records.meta = [{"checkpoint": "../../model"}] * 2
        write_atomic(records.table()[0], folder / step_file_name(5))
        import_path(store, folder, "rec")
        assert step_checkpoints(store, "rec")[1] == str(tmp_path / "elsewhere")
        assert step_checkpoints(store, "rec")[5] == str((tmp_path / "model").resolve())
