"""The Runs page's import form never merges runs by accident (it refuses in the form's own words and appends
only when asked), and the Resample page says in place that a run's model folder is missing instead of
stopping the page."""

from __future__ import annotations

import json

import pytest

from app import access, keys
from backend.store import Store
from tests.app.conftest import open_app, open_tab
from tests.conftest import make_records


@pytest.fixture
def writable(monkeypatch, app_db):
    for name in (access.READ_ONLY_ENV, access.MAX_SUFFIXES_ENV):
        monkeypatch.delenv(name, raising=False)
    return access.settings(app_db)


def _rollouts(db, run: str) -> int:
    with Store(db, read_only=True) as store:
        return next(r["rollouts"] for r in store.list_runs() if r["name"] == run)


def test_the_import_form_refuses_a_merge_and_appends_on_purpose(writable, app_db):
    """Before: uploading other rollouts under an existing name merged them into it silently."""
    content = "".join(json.dumps(r) + "\n" for r in make_records(n_groups=1, group_size=2, seed=11)).encode()
    before = _rollouts(app_db, "small")
    at = open_app(app_db, "runs")
    at.text_input(key="runs_import_name").set_value("small").run()
    at.file_uploader(key="runs_import_upload").set_value(("more.jsonl", content, "application/jsonl")).run()
    at.button(key="runs_import_button").click().run()
    assert not at.exception, [e.message for e in at.exception]
    (error,) = [e.value for e in at.error]
    assert "run 'small' already exists" in error and "more.jsonl holds other content" in error
    assert 'tick "Append to an existing run"' in error and "--" not in error  # the form's words, no CLI
    assert _rollouts(app_db, "small") == before

    at.checkbox(key="runs_import_append").check().run()
    at.button(key="runs_import_button").click().run()
    assert not at.error, [e.value for e in at.error]
    assert any("imported 2 rollouts" in s.value for s in at.success), [s.value for s in at.success]
    assert _rollouts(app_db, "small") == before + 2


def test_resample_says_in_place_that_the_model_folder_is_missing(writable, app_db):
    """Before: a model recorded as a relative path (or moved since) stopped the page at `model folder ...
    does not exist`; now the page renders whole and says so where the buttons are."""
    with Store(app_db) as store:
        store.con.execute(
            "UPDATE runs SET model_dir = ? WHERE name = 'demo'", ["repo/sample_runs/demo-policy"]
        )
        # the demo records each step's checkpoint; rollout 2 is step 0's, moved the same way
        store.con.execute(
            "UPDATE step_checkpoints SET model_dir = ? WHERE run_id = ? AND step = 0",
            ["repo/sample_runs/demo-policy-steps/step0", store.run_id("demo")],
        )
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "2"})
    assert not at.exception, [e.message for e in at.exception]
    warnings = [w.value for w in at.warning]
    assert any(
        "model folder 'repo/sample_runs/demo-policy-steps/step0' does not exist on this machine" in w
        for w in warnings
    ), warnings
    assert at.button(key="resample_run").disabled
    model_credit = "Model-based credit: OAR-P, OAR-G, GCPO"
    assert {"V̂(s_t) along the rollout", model_credit} <= {t.label for t in at.tabs}  # the page renders whole
    open_tab(at, keys.RESAMPLE_TAB, model_credit)
    assert any("Model-based scores are off for this run" in i.value for i in at.info)
