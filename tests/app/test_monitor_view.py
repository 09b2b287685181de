"""Trends shows the credit-health alerts of `backend.monitor.monitors.run_monitors` (what `creditlens monitor`
prints): a dashed line at each onset on the charts and an alert list linking to the Explorer and the
rollouts."""

from __future__ import annotations

import plotly.graph_objects as go

from app.ui import monitor_panel
from backend.ingest import import_records
from backend.monitor import monitors as monitor
from backend.store import Store, StoreHandle
from tests.app.conftest import chart, open_app
from tests.backend.test_monitor import ONSET, monitor_records


def test_trends_marks_the_alert_steps_and_lists_the_alerts_with_links(app_db):
    with Store(app_db) as store:
        import_records(store, "sick", monitor_records("truncation", seed=2), content_key="sick")
    at = open_app(app_db, "trends", {"run": "sick", "tab": "behaviour"})
    assert not at.exception, at.exception
    want = monitor.run_monitors(StoreHandle(app_db), "sick", "grpo", prepare_missing=False)
    assert [a.step for a in want.alerts if a.detector == "truncation"] == [ONSET]
    shapes = chart(at, "trends_groups")["layout"]["shapes"]
    assert sorted({s["x0"] for s in shapes}) == sorted({a.step for a in want.alerts})
    shown = [m.value for m in at.markdown if "· step" in m.value]
    assert len(shown) == len(want.alerts)
    assert any(f"step {ONSET} · `truncation`" in m for m in shown)
    links = [e.proto for e in at.get("page_link")]
    labels = [link.label for link in links]
    assert f"Explorer at step {ONSET}" in labels
    first = next(a for a in want.alerts if a.detector == "truncation").rollouts[0]
    rollout = next(link for link in links if link.label == f"rollout {first}")
    assert "rollout" in rollout.page and f"rollout={first}" in rollout.query_string


def test_the_charts_are_drawn_before_the_monitors_run(app_db, monkeypatch):
    """The first draw does not wait for the monitors: with monitors that fail, the charts are there
    (unmarked) above the error."""
    with Store(app_db) as store:
        import_records(store, "slow", monitor_records("truncation", seed=2), content_key="slow")

    def failing(*args, **kwargs):
        raise RuntimeError("the monitors are still running")

    monkeypatch.setattr(monitor, "run_monitors", failing)
    at = open_app(app_db, "trends", {"run": "slow", "tab": "behaviour"})
    assert any("still running" in e.value for e in at.error)
    assert "shapes" not in chart(at, "trends_unmarked_groups")["layout"]
    assert chart(at, "trends_unmarked_length")["data"]


def test_a_report_in_the_servers_cache_draws_each_chart_once(app_db, monkeypatch):
    """A new session (a fresh page load) whose report another session has had (the warm-up has the landing
    run's) waits for it: each chart is drawn once, marked, not first unmarked and then again marked. The
    report is made to fail in the second session to see what was drawn before it was asked for."""
    with Store(app_db) as store:
        import_records(store, "sick", monitor_records("truncation", seed=2), content_key="sick")
    first = open_app(app_db, "trends", {"run": "sick", "tab": "behaviour"})
    assert chart(first, "trends_groups")["layout"]["shapes"]

    def failing(*args, **kwargs):
        raise RuntimeError("the cached report is not read in this test")

    monkeypatch.setattr(monitor_panel, "report", failing)
    again = open_app(app_db, "trends", {"run": "sick", "tab": "behaviour"})
    assert any("not read in this test" in e.value for e in again.error)
    assert not [e.proto.id for e in again.get("plotly_chart")]  # nothing drawn before the report


def test_a_healthy_run_says_so(app_db):
    with Store(app_db) as store:
        import_records(store, "fine", monitor_records(None, seed=0), content_key="fine")
    at = open_app(app_db, "trends", {"run": "fine"})
    assert not at.exception
    assert any("no detector departs" in s.value for s in at.success)


def test_the_explorer_link_lists_the_alert_rollouts_first(app_db):
    with Store(app_db) as store:
        import_records(store, "sick", monitor_records("truncation", seed=2), content_key="sick")
    found = monitor.run_monitors(StoreHandle(app_db), "sick", "grpo")
    alert = next(a for a in found.alerts if a.detector == "truncation")
    at = open_app(app_db, "explorer", monitor_panel.explorer_link("sick", alert))
    assert not at.exception, at.exception
    (frame,) = [d.value for d in at.dataframe if "rollout_id" in d.value.columns]
    assert frame["rollout_id"].tolist()[: len(alert.rollouts)] == alert.rollouts
    assert set(frame["step"]) == {ONSET} and frame["truncated"].all()
    at.button(key="explorer_clear_where").click().run()
    (frame,) = [d.value for d in at.dataframe if "rollout_id" in d.value.columns]
    assert set(frame["step"]) != {ONSET}


def test_an_alert_link_followed_within_a_session_takes_its_sort_once():
    """AppTest cannot follow a page link within a session, so the step the Explorer takes is checked alone:
    the link's sort replaces the kept one once; the user's later choice then stands."""
    session = {"explorer_sort": "rollout_id", "_keep_explorer_sort": "rollout_id", "explorer_desc": False}
    link = {"run": "r", "where": "step=9,truncated=true", "sort": "length", "desc": "True"}
    monitor_panel.follow_alert_link(link, session, ["rollout_id", "length"])
    assert session["explorer_sort"] == session["_keep_explorer_sort"] == "length" and session["explorer_desc"]
    session["explorer_sort"] = "rollout_id"  # the user sorts again; the same link does not undo it
    monitor_panel.follow_alert_link(link, session, ["rollout_id", "length"])
    assert session["explorer_sort"] == "rollout_id"
    monitor_panel.follow_alert_link({**link, "sort": "nope", "where": "step=3"}, session, ["rollout_id"])
    assert session["explorer_sort"] == "rollout_id"  # not a column of this table: the sort stays
    monitor_panel.follow_alert_link({"sort": "length"}, session, ["length"])  # no alert filter: no link
    assert session["explorer_sort"] == "rollout_id"


def test_close_alert_onsets_on_a_long_run_share_one_label():
    """On a 150-step run, onsets 3 steps apart had their labels drawn over one another ('wa wa warn'): each
    onset keeps its line, onsets closer than a twelfth of the steps share the first one's label, and its
    hover names every step's detector (a statistic carries a class name from the user: escaped)."""

    def alert(step, severity, statistic="pos_share_filler"):
        return monitor.Alert("position_drift", statistic, step, severity, 0.5, 0.1, 0.1, 4.0, message="")

    fig = go.Figure(go.Scatter(x=list(range(150)), y=[0.0] * 150))
    alerts = [alert(30, "warn"), alert(33, "alert", "pos_share_<b>x</b>"), alert(36, "warn")]
    alerts.append(alert(90, "warn"))
    marked = monitor_panel.mark_alerts(fig, alerts)
    assert sorted(s.x0 for s in marked.layout.shapes) == [30, 33, 36, 90]
    labels = {a.x: a for a in marked.layout.annotations}
    assert sorted(labels) == [30, 90]
    assert labels[30].text == "alert ×3" and labels[90].text == "warn"
    assert [f"step {s}" in labels[30].hovertext for s in (30, 33, 36)] == [True] * 3
    assert "<b>" not in labels[30].hovertext and "&lt;b&gt;" in labels[30].hovertext
