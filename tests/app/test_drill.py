"""Drill from a Trends point to its rollouts (issue 46 item 5): a point clicked on a Trends chart opens the
Explorer filtered to that step, the rows of `creditlens rollouts --where step=N`. AppTest cannot click a
Plotly point (nor rerun the page it switched to), so the click's request is set as the chart's callback
sets it (`drill.on_click`); the click, and the filter holding over the reruns that follow until it is
cleared, were driven in headless Chromium."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from app.ui import drill
from backend.store import StoreHandle
from backend.views import explorer, reward_histogram
from tests.app.conftest import open_app
from tests.conftest import run_cli_here


def _rows(at):
    (frame,) = [d.value for d in at.dataframe if "rollout_id" in d.value.columns]
    return frame


def test_a_clicked_step_opens_the_explorer_on_that_steps_rollouts(app_db):
    at = open_app(app_db, "trends", {"run": "demo"})
    assert any("Click a point to open that step" in c.value for c in at.caption)
    at.session_state[drill.DRILL_REQUEST] = ("demo", "step=2", None)
    at.run()
    assert not at.exception, at.exception
    assert at.title[0].value.startswith("Explorer")
    frame = _rows(at)
    assert set(frame["step"]) == {2}
    listed = run_cli_here("rollouts", "--db", app_db, "--run", "demo", "--where", "step=2", "--json")
    assert listed.returncode == 0, listed.stderr
    assert sorted(frame["rollout_id"]) == sorted(r["rollout_id"] for r in json.loads(listed.stdout))[:50]
    assert "step=2" in at.button(key="explorer_clear_where").label


def test_the_clicked_step_is_read_from_the_selection_event():
    assert drill.clicked_step(None) is None
    assert drill.clicked_step({"selection": {"points": []}}) is None
    assert drill.clicked_step({"selection": {"points": [{"x": 3, "y": 0.5}]}}) == 3
    assert drill.clicked_step({"selection": {"points": [{"y": 1}, {"x": 2.0}]}}) == 2


def test_what_a_click_opens_comes_from_the_point():
    class_point = {"x": 3, "y": 0.2, "customdata": ["share_filler"]}
    assert drill.clicked({"selection": {"points": [class_point]}}) == ("step=3", "share_filler")
    bin_point = {"x": 1, "y": 0.5, "customdata": ["step=1,reward>=0.2,reward<0.4", "[0.2, 0.4)", 7]}
    assert drill.clicked({"selection": {"points": [bin_point]}}) == ("step=1,reward>=0.2,reward<0.4", None)
    assert drill.clicked({"selection": {"points": [{"x": 4.0, "y": 1}]}}) == ("step=4", None)
    assert drill.clicked({"selection": {"points": []}}) is None


def _rows_of(db, run: str, where: str) -> int:
    query = explorer.ExplorerQuery(
        filters=tuple(explorer.parse_where(p) for p in where.split(",")), limit=None
    )
    return len(explorer.rollout_table(StoreHandle(db), run, query).rows)


@pytest.mark.parametrize("run", ["demo", "kl-0.0"])
def test_each_reward_bin_counts_the_rollouts_its_filter_lists(app_db, run):
    """demo's summed rewards spread (equal-width bins); kl-0.0's 0/1-like rewards get a bin per value."""
    hist = reward_histogram.reward_histogram(StoreHandle(app_db), run)
    assert len(hist) > 0
    for row in hist.itertuples():
        assert _rows_of(app_db, run, row.where) == row.rollouts, row.where
    with StoreHandle(app_db).read() as store:
        per_step = store.rollout_keys(run).groupby("step").size()
    assert hist.groupby("step")["rollouts"].sum().to_dict() == per_step.to_dict()  # every rollout scored
    if run == "kl-0.0":
        assert (hist["low"] == hist["high"]).all() and hist["where"].str.contains(r"reward=").all()
    listed = run_cli_here("histogram", "--db", app_db, "--run", run, "--json")
    assert listed.returncode == 0, listed.stderr
    pd.testing.assert_frame_equal(pd.DataFrame(json.loads(listed.stdout)), hist, check_dtype=False)


def test_a_clicked_bin_or_class_opens_its_rollouts_in_the_explorer(app_db):
    hist = reward_histogram.reward_histogram(StoreHandle(app_db), "demo")
    row = hist.sort_values("rollouts").iloc[len(hist) // 2]
    at = open_app(app_db, "trends", {"run": "demo"})
    assert any("a reward dot, the rollouts of its bin" in c.proto.help for c in at.caption)  # its hover help
    at.session_state[drill.DRILL_REQUEST] = ("demo", row["where"], None)
    at.run()
    assert not at.exception, at.exception
    frame = _rows(at)
    assert len(frame) == min(row["rollouts"], 50) and set(frame["step"]) == {row["step"]}

    at = open_app(app_db, "trends", {"run": "demo"})
    at.session_state[drill.DRILL_REQUEST] = ("demo", "step=1", "share_filler")
    at.run()
    assert not at.exception, at.exception
    frame = _rows(at)
    assert set(frame["step"]) == {1}
    shares = frame["share_filler"].fillna(-1).tolist()
    assert shares == sorted(shares, reverse=True) and at.session_state["explorer_sort"] == "share_filler"
