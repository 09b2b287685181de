"""--read-only: browsing, estimators and explanations work; import, delete, score, resample and teacher
jobs are hidden on the pages and refused by the functions that perform them."""

from __future__ import annotations

import numpy as np
import pytest

from app import access, actions, jobs, keys
from backend.store import Store, StoreHandle
from tests.app.conftest import chart, heatmap_z, open_app
from tests.conftest import make_records, run_cli_here, snapshot, write_jsonl


@pytest.fixture
def read_only(monkeypatch, app_db):
    monkeypatch.setenv(access.READ_ONLY_ENV, "1")
    current = access.settings(app_db)
    assert current.read_only
    return current


def _snapshot(db) -> dict:
    with Store(db, read_only=True) as store:
        return snapshot(store)


def test_views_browse_and_estimate(read_only, app_db):
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": "3"})
    assert any("Read-only server" in c.value for c in at.sidebar.caption)
    z = heatmap_z(chart(at, "rollout_heatmap"))
    assert np.isfinite(z).sum() > 0  # the estimator ran and its credit is drawn
    at.number_input(key="rollout_pos").set_value(2).run()  # "why this credit" for another token
    assert not at.exception and any("token 2" in s.value for s in at.subheader)
    for page in ("group", "compare", "tune", "oracle"):
        at.switch_page(f"../pages/{page}.py").run()
        assert not at.exception, (page, [e.message for e in at.exception])


def test_runs_page_hides_import_and_delete(read_only, app_db):
    at = open_app(app_db, "runs")
    assert at.dataframe, "the runs table is still shown"
    assert any("read-only mode" in i.value for i in at.info)
    keys = {b.key for b in at.button}
    assert not keys & {"runs_import_button", "runs_delete_button"}, keys
    assert not [t for t in at.text_input if t.key == "runs_import_path"]
    assert not at.get("file_uploader")


def test_resample_page_hides_the_run_button_and_still_shows_stored_values(read_only, app_db):
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "0"})
    assert any("resampling is switched off" in i.value for i in at.info)
    assert not {b.key for b in at.button} & {"resample_run", "resample_cancel"}
    assert at.session_state[keys.RESAMPLE_TAB] == "V̂(s_t) along the rollout"  # the first tab: the values
    chart(at, "resample_values")


def test_every_write_action_is_refused_server_side(read_only, app_db, tmp_path):
    source = write_jsonl(tmp_path / "run.jsonl", make_records(n_groups=1, group_size=2, seed=1))
    content = source.read_bytes()
    handle = StoreHandle(app_db)
    before = _snapshot(app_db)
    attempts = {
        "import": lambda: actions.import_from_path(read_only, handle, str(source), "new"),
        "import (upload)": lambda: actions.import_upload(read_only, handle, "run.jsonl", content, "new"),
        "delete": lambda: actions.delete_run(read_only, handle, "demo"),
        "main channel": lambda: actions.set_main_channel(read_only, handle, "demo", "all"),
        "resample": lambda: jobs.start_resample(
            read_only, str(app_db), handle, "demo", 0, _never_loaded, {}, None, [0], 2
        ),
        "model credit": lambda: jobs.start_model_credit(
            read_only, str(app_db), handle, "demo", 0, _never_loaded, "gcpo", "unused", "auto"
        ),
    }
    for kind in jobs.MODEL_JOBS:  # resample, teacher and score jobs, however they are built
        attempts[f"{kind} job"] = lambda kind=kind: jobs.start(
            read_only, str(app_db), kind, jobs.Job(_must_not_run)
        )
    for name, attempt in attempts.items():
        with pytest.raises(access.Refused, match="read-only mode") as err:
            attempt()
        assert "switched off" in str(err.value), name
    assert jobs.running_job(str(app_db)) is None
    assert _snapshot(app_db) == before


def test_the_same_actions_work_without_read_only(app_db, tmp_path, monkeypatch):
    monkeypatch.delenv(access.READ_ONLY_ENV, raising=False)
    current = access.settings(app_db)
    source = write_jsonl(tmp_path / "run.jsonl", make_records(n_groups=1, group_size=2, seed=1))
    handle = StoreHandle(app_db)
    actions.import_from_path(current, handle, str(source), "new")
    actions.delete_run(current, handle, "small")
    with handle.read() as store:
        names = {r["name"] for r in store.list_runs()}
    assert "new" in names and "small" not in names


def test_read_only_cli_creates_no_store(tmp_path, capfd):
    missing = tmp_path / "none.duckdb"
    done = run_cli_here("app", "--db", str(missing), "--read-only")
    assert done.returncode == 2
    err = done.stderr + capfd.readouterr().err  # the launcher runs in its own process
    assert "read-only mode creates nothing" in err and len(err.strip().splitlines()) == 1
    assert not missing.exists()


def _never_loaded():
    raise AssertionError("a refused request must not load a model")


def _must_not_run(job):
    raise AssertionError("a refused job must not start")
