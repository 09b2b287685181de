"""A verl run's per-rollout metrics in the Explorer (a column, a range filter) and in Trends (a chart), with
the numbers of `backend.views.explorer` (what `creditlens rollouts` / `trends` print)."""

from __future__ import annotations

import numpy as np

from app import keys
from backend.ingest import import_path
from backend.store import Store, StoreHandle
from backend.views import explorer
from tests.app.conftest import chart, decode, open_app
from tests.backend.ingest.verl_dumps import v1_step


def _verl_store(app_db, tmp_path):
    directory = tmp_path / "rollout_data_dir"
    for step in (1, 2):
        v1_step(directory, step, acc=True)
    with Store(app_db) as store:
        import_path(store, directory, "verl")
    return app_db


def _table(at):
    (frame,) = [d.value for d in at.dataframe if "rollout_id" in d.value.columns]
    return frame


def test_explorer_shows_and_filters_a_metric(app_db, tmp_path):
    db = _verl_store(app_db, tmp_path)
    at = open_app(db, "explorer", {"run": "verl"}, opened=(keys.EXPLORER_FILTERS_OPEN,))
    frame = _table(at)
    want = explorer.rollout_table(StoreHandle(db), "verl", explorer.ExplorerQuery(limit=None))
    assert "metric_acc" in frame.columns and "score_acc" not in frame.columns
    shown = want.rows["metric_acc"].to_numpy()[: len(frame)]
    np.testing.assert_array_equal(frame["metric_acc"].to_numpy(), shown)
    at.multiselect(key="explorer_ranged").set_value(["metric_acc"]).run()
    at.slider(key="explorer_range_metric_acc").set_value((0.5, 1.0)).run()
    assert not at.exception
    kept = _table(at)
    assert len(kept) == int(want.rows["metric_acc"].sum()) and (kept["metric_acc"] == 1.0).all()


def test_trends_chart_the_metric(app_db, tmp_path):
    db = _verl_store(app_db, tmp_path)
    at = open_app(db, "trends", {"run": "verl"})
    want = explorer.step_trends(StoreHandle(db), "verl")
    (line,) = chart(at, "trends_metrics")["data"]
    assert line["name"] == "acc"
    np.testing.assert_allclose(np.asarray(decode(line["y"]), dtype=float), want["metric_acc"])
    names = [trace["name"] for trace in chart(at, "trends_scores")["data"]]
    assert "acc" not in names  # not a reward channel


def test_the_runs_page_lists_each_runs_channels_and_metrics(app_db, tmp_path):
    """Before: the Runs page listed channels only (issue 42 item 4); its rows are those of `creditlens runs
    --json`."""
    db = _verl_store(app_db, tmp_path)
    at = open_app(db, "runs")
    assert not at.exception
    (table,) = [d.value for d in at.dataframe if "metrics" in d.value.columns]
    shown = table.set_index("name")
    assert list(table.columns).index("metrics") == list(table.columns).index("channels") + 1
    assert (shown.loc["verl", "channels"], shown.loc["verl", "metrics"]) == ("task", "acc")
    with Store(db, read_only=True) as store:
        runs = {r["name"]: r for r in store.list_runs()}
    for name in runs:
        assert shown.loc[name, "metrics"] == (", ".join(runs[name]["metrics"]) or "–")
        assert shown.loc[name, "channels"] == ", ".join(runs[name]["channels"])
