"""Run names are never merged by accident (backend/ingest/append.py): other content into an existing run is
refused unless appended on purpose, and an append must match the run's model and channels; re-imports stay
idempotent and a growing log (a run directory again, `--follow`) keeps adding its new steps. Model folders
are stored absolute; a failed import against a new store path leaves nothing behind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import pytest

from backend.ingest import import_path
from backend.ingest.append import ImportRefused
from backend.ingest.follow import follow
from backend.store import Store
from tests.conftest import make_records, run_cli_here, snapshot, write_jsonl

from .trl_logs import DEMO_POLICY
from .verl_dumps import legacy_step, v1_step


def _dumps(tmp_path: Path) -> tuple[Path, Path]:
    """Two verl logs of different runs (the legacy and the v1 trainer), two steps each."""
    legacy, v1 = tmp_path / "legacy", tmp_path / "v1"
    for step in (1, 2):
        legacy_step(legacy, step)
        v1_step(v1, step)
    return legacy, v1


def test_other_content_into_an_existing_run_is_refused_and_nothing_is_written(db_path, tmp_path):
    """Before: the second import merged silently (groups mixing both logs, the first run's model)."""
    legacy, v1 = _dumps(tmp_path)
    assert run_cli_here("import", legacy, "--db", db_path, "--run", "x", "--quiet").returncode == 0
    with Store(db_path) as store:
        before = snapshot(store)
    result = run_cli_here("import", v1, "--db", db_path, "--run", "x", "--quiet")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    err = result.stderr.strip()
    assert len(err.splitlines()) == 1
    assert f"run 'x' already exists (18 rollouts from verl import); {v1} holds other content" in err
    assert "choose another --run name, or pass --append" in err
    with Store(db_path) as store:
        assert snapshot(store) == before and store.list_runs()[0]["rollouts"] == 18
    # the same content again is idempotent, by any path to it
    for again in (legacy, legacy / "1.jsonl"):
        result = run_cli_here("import", again, "--db", db_path, "--run", "x", "--quiet")
        assert result.returncode == 0 and "nothing added" in result.stdout, result.stderr
    # on purpose: --append (same tokenizer, same channels)
    result = run_cli_here("import", v1, "--db", db_path, "--run", "x", "--append", "--quiet")
    assert result.returncode == 0, result.stderr
    with Store(db_path, read_only=True) as store:
        assert store.list_runs()[0]["rollouts"] == 36


def test_a_grown_log_keeps_adding_its_steps_without_append(store, tmp_path):
    run_dir = tmp_path / "rollout_data_dir"
    legacy_step(run_dir, 1)
    assert import_path(store, run_dir, "live").records == 9
    legacy_step(run_dir, 2)  # the trainer wrote a step: the same directory again
    grown = import_path(store, run_dir, "live")
    assert (grown.records, grown.skipped) == (9, 9)
    copy = tmp_path / "copy"  # the log reached through a copy that grew further: its records overlap
    shutil.copytree(run_dir, copy)
    legacy_step(copy, 3)
    assert import_path(store, copy, "live").records == 9
    assert store.list_runs()[0]["rollouts"] == 27


def test_append_refuses_other_channels(store, tmp_path):
    legacy, _ = _dumps(tmp_path)
    import_path(store, legacy, "x")
    before = snapshot(store)
    native = write_jsonl(tmp_path / "n.jsonl", make_records(n_groups=1))  # channels task and style
    with pytest.raises(ImportRefused) as refused:
        import_path(store, native, "x", append=True)
    assert "run 'x' has the reward channels task; " in str(refused.value)
    assert "has style, task; rollouts scored on other channels cannot share its groups" in str(refused.value)
    assert snapshot(store) == before


def test_append_refuses_another_tokenizer(db_path, tmp_path):
    legacy, v1 = _dumps(tmp_path)
    model = DEMO_POLICY.resolve()
    assert (
        run_cli_here("import", legacy, "--db", db_path, "--run", "x", "--model", model, "--quiet").returncode
        == 0
    )
    result = run_cli_here("import", v1, "--db", db_path, "--run", "x", "--append", "--quiet")
    assert result.returncode == 2
    assert (
        f"run 'x' was tokenized with the tokenizer of {model}, this import with the simple tokenization "
        f"(no model); one run is cut one way; import with --model {model} to add to it"
    ) in result.stderr
    with Store(db_path, read_only=True) as store:
        assert store.list_runs()[0]["rollouts"] == 18
    result = run_cli_here(
        "import", v1, "--db", db_path, "--run", "x", "--append", "--model", model, "--quiet"
    )
    assert result.returncode == 0, result.stderr


def test_the_app_message_gives_no_command_line_advice(store, tmp_path):
    legacy, v1 = _dumps(tmp_path)
    import_path(store, legacy, "x")
    with pytest.raises(ImportRefused) as refused:
        import_path(store, v1, "x")
    assert "--" not in refused.value.app_message
    assert 'tick "Append to an existing run"' in refused.value.app_message


def test_follow_refuses_a_run_it_never_fed_and_continues_its_own(db_path, tmp_path):
    legacy, v1 = _dumps(tmp_path)
    with Store(db_path) as store:
        import_path(store, legacy, "x")

    def opener():
        return Store(db_path)

    polls = iter([False, True])
    with pytest.raises(ImportRefused, match="was never imported into it; following it would merge"):
        follow(opener, v1, "x", poll_seconds=0, stop=lambda: next(polls))
    legacy_step(legacy, 3)
    stops = iter([False, False, True])  # a file counts once its size held between two polls
    files, rollouts = follow(opener, legacy, "x", poll_seconds=0, stop=lambda: next(stops))
    assert rollouts == 9  # steps 1 and 2 were in the run: only step 3 added
    polls = iter([False, False, True])
    files, rollouts = follow(opener, v1, "x", poll_seconds=0, stop=lambda: next(polls), append=True)
    assert rollouts == 18


def test_a_relative_model_is_stored_absolute(db_path, tmp_path, monkeypatch):
    legacy, _ = _dumps(tmp_path)
    monkeypatch.chdir(DEMO_POLICY.parent)
    assert (
        run_cli_here(
            "import", legacy, "--db", db_path, "--run", "x", "--model", DEMO_POLICY.name, "--quiet"
        ).returncode
        == 0
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with Store(db_path, read_only=True) as store:
        info = store.run_info("x")
    assert info["model_dir"] == str(DEMO_POLICY.resolve()) and os.path.isabs(info["model_dir"])
    assert info["tokenizer"] == f"hf:{DEMO_POLICY.resolve()}"
    result = run_cli_here("score", "--db", db_path, "--run", "x")  # the recorded model, from another folder
    assert result.returncode == 0, result.stderr


def test_a_failed_import_against_a_new_store_path_leaves_nothing(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"prompt": "p", "response": "r"}])  # no rewards
    new_store = tmp_path / "fresh" / "deeper" / "runs.duckdb"
    result = run_cli_here("import", bad, "--db", new_store, "--run", "x", "--quiet")
    assert result.returncode == 2 and "missing required field 'rewards'" in result.stderr
    assert not (tmp_path / "fresh").exists()
    result = run_cli_here("import", tmp_path / "absent.jsonl", "--db", new_store, "--run", "x", "--quiet")
    assert result.returncode == 2 and not (tmp_path / "fresh").exists()
    existing = tmp_path / "runs.duckdb"
    Store(existing).close()
    assert run_cli_here("import", bad, "--db", existing, "--run", "x", "--quiet").returncode == 2
    assert existing.exists()  # a store that was there stays


def _trl_step(folder: Path, step: int, format_reward: list[float], **extra: list[float]) -> Path:
    """A TRL completions file of one step: two groups of two, accuracy_reward and format_reward."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"completions_{step:05d}.parquet"
    pd.DataFrame(
        {
            "step": [step] * 4,
            "prompt": [f"p{step}a", f"p{step}a", f"p{step}b", f"p{step}b"],
            "completion": ["a", "b", "c", "d"],
            "accuracy_reward": [1.0, 0.0, 1.0, 0.0],
            "format_reward": format_reward,
            **extra,
            "advantage": [0.7, -0.7, 0.7, -0.7],
        }
    ).to_parquet(path)
    return path


def test_append_compares_the_channels_that_hold_values(db_path, tmp_path):
    """Before: a reward column that is NaN in every row of the appended file still counted as the run's
    channel, so the append passed silently with rollouts that score nothing on it (issue 42 item 6)."""
    nan = float("nan")
    first = _trl_step(tmp_path / "a", 1, [0.5, 0.5, nan, 0.0])
    assert run_cli_here("import", first, "--db", db_path, "--run", "x", "--quiet").returncode == 0
    with Store(db_path, read_only=True) as store:
        before = snapshot(store)
    empty = _trl_step(tmp_path / "b", 2, [nan] * 4)
    done = run_cli_here("import", empty, "--db", db_path, "--run", "x", "--append", "--quiet")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert (
        f"{empty}: channel 'format_reward' is NaN in every one of the 4 rollouts it adds, so it scores only "
        "accuracy_reward while run 'x' has the reward channels accuracy_reward, format_reward"
    ) in done.stderr
    with Store(db_path, read_only=True) as store:
        assert snapshot(store) == before
    # a column the run lacks, empty in the file, makes no channel: the append matches, and the summary says so
    extra = _trl_step(tmp_path / "c", 3, [1.0, 0.0, 0.0, 1.0], style_reward=[nan] * 4)
    done = run_cli_here("import", extra, "--db", db_path, "--run", "x", "--append", "--quiet")
    assert done.returncode == 0, done.stderr
    assert f"channel 'style_reward' is NaN in every row of {extra}: it holds no score" in done.stdout
    with Store(db_path, read_only=True) as store:
        assert store.list_runs()[0]["channels"] == ["accuracy_reward", "format_reward"]
        assert store.list_runs()[0]["rollouts"] == 8
