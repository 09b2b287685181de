"""`import --follow` (and `watch`, which runs it) on a folder of native JSONL step files, and on a folder the
trainer has not created yet. The follower is driven poll by poll through its `stop` callback: each poll the
test writes what the trainer would write next, so nothing waits on a clock."""

from __future__ import annotations

import json

import pytest

from backend.cli import store as cli_store
from backend.core.errors import InputError
from backend.ingest.follow import follow
from backend.store import Store
from tests.conftest import make_records, run_cli_here, write_jsonl

RECORDS = make_records(n_groups=2, group_size=3, seed=5, steps=3)  # 6 rollouts a step


def write_step(folder, step: int):
    """`step_0000.jsonl`, ...: one step's native records, as a training loop of one's own writes them."""
    return write_jsonl(folder / f"step_{step:04d}.jsonl", [r for r in RECORDS if r["step"] == step])


class Trainer:
    """What happens between the follower's polls: the folder appears, then a step file after each import.
    After `most` polls it stops the follower whatever happened, so a follower that never imports ends the
    test (in its assertions) instead of hanging it."""

    def __init__(self, folder, steps: int, most: int = 60):
        self.folder, self.steps, self.most = folder, steps, most
        self.polls = 0
        self.reported: list[str] = []
        self.waited: list = []

    def stop(self) -> bool:
        self.polls += 1
        if self.polls == 2:  # the follower looked once and found no folder
            self.folder.mkdir(parents=True)
            write_step(self.folder, 0)
        return len(self.reported) == self.steps or self.polls > self.most

    def report(self, rep, path) -> None:
        self.reported.append(path.name)
        if len(self.reported) < self.steps:
            write_step(self.folder, len(self.reported))


def test_follow_waits_for_its_folder_and_imports_native_jsonl_step_files(db_path, tmp_path):
    folder = tmp_path / "later" / "recorder"  # not there yet, nor its parent
    trainer = Trainer(folder, steps=3)
    files, rollouts = follow(
        lambda: Store(db_path),
        folder,
        "live",
        on_report=trainer.report,
        on_waiting=trainer.waited.append,
        stop=trainer.stop,
        poll_seconds=0,
    )
    assert trainer.waited == [folder]  # said once
    assert trainer.reported == ["step_0000.jsonl", "step_0001.jsonl", "step_0002.jsonl"]
    assert (files, rollouts) == (3, 18)
    with Store(db_path, read_only=True) as store:
        index = store.rollout_index("live")
    assert sorted(index["step"].unique().tolist()) == [0, 1, 2] and len(index) == 18


def test_a_grown_native_jsonl_step_file_adds_only_its_new_records(db_path, tmp_path):
    folder = tmp_path / "steps"
    folder.mkdir()
    path = write_step(folder, 0)
    polls = iter([False, False, True])
    assert follow(lambda: Store(db_path), folder, "live", stop=lambda: next(polls), poll_seconds=0) == (1, 6)
    with open(path, "a") as fh:  # the step file grows by 6 records
        fh.writelines(json.dumps(r) + "\n" for r in RECORDS if r["step"] == 1)
    polls = iter([False, False, True])
    assert follow(lambda: Store(db_path), folder, "live", stop=lambda: next(polls), poll_seconds=0) == (1, 6)


def test_follow_refuses_a_file_where_its_folder_should_be(db_path, tmp_path):
    path = write_step(tmp_path, 0)
    with pytest.raises(InputError, match="--follow needs a directory"):
        follow(lambda: Store(db_path), path, "live", stop=lambda: True, poll_seconds=0)


def test_import_follow_says_it_waits_for_the_folder_then_follows_it(db_path, tmp_path, monkeypatch):
    """The command line: one line saying what it waits for, then each step file as it lands."""
    folder = tmp_path / "recorder"
    real_follow = cli_store.follow

    def follow_as_the_trainer_writes(*args, on_report, on_waiting, **kwargs):
        def waiting(path):
            on_waiting(path)
            folder.mkdir()
            write_step(folder, 0)

        def report_then_ctrl_c(rep, path):
            on_report(rep, path)
            raise KeyboardInterrupt

        return real_follow(*args, on_report=report_then_ctrl_c, on_waiting=waiting, **kwargs)

    monkeypatch.setattr(cli_store, "follow", follow_as_the_trainer_writes)
    done = run_cli_here("import", folder, "--db", db_path, "--run", "live", "--follow", "--poll", "0.01")
    assert done.returncode == 0, done.stderr
    assert f"waiting for {folder} to appear" in done.stderr
    assert "step_0000.jsonl: live: imported 6 rollouts" in done.stdout
    assert "6 rollouts from 1 files" in done.stdout


def test_steps_that_landed_together_are_imported_under_one_write_connection(db_path, tmp_path):
    """A trainer ahead of the follower (or a follower started late): the files ready at one poll are imported
    under one open of the store, so a reader redrawing after each commit cannot hold the next file back; each
    file is still its own transaction, so a bad one leaves the ones before it imported."""
    folder = tmp_path / "steps"
    folder.mkdir()
    for step in range(3):
        write_step(folder, step)
    opens = []

    def opened():
        opens.append(1)
        return Store(db_path)

    polls = iter([False, False, True])
    assert follow(opened, folder, "live", stop=lambda: next(polls), poll_seconds=0) == (3, 18)
    assert len(opens) == 2  # the run check, then one open for the three files
    (folder / "step_0003.jsonl").write_text('{"step": 3, "oops": \n')
    (folder / "step_0004.jsonl").write_text("")  # empty: never complete, never tried
    polls = iter([False, False, True])
    with pytest.raises(InputError, match="step_0003.jsonl"):
        follow(lambda: Store(db_path), folder, "live", stop=lambda: next(polls), poll_seconds=0)
    with Store(db_path, read_only=True) as store:
        assert len(store.rollout_index("live")) == 18  # the three good steps stay, the bad one added nothing
