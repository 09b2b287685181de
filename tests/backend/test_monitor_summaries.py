"""The monitors read stored per-rollout summaries (migration 011): the channel summary behind
`channel_takeover` and the summary's `garbled` give the numbers of the in-memory reference (the split-channel
credit of every token, the regular-expression scan of every response) on planted runs, the alerts are the
same, and the stored rows are dropped whenever the run's inputs change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from backend.ingest import import_records
from backend.monitor import channels as monitor_channels
from backend.monitor import monitors as monitor
from backend.store import Store, StoreHandle
from backend.store.explorer_queries import GARBLED_SQL
from tests.backend.test_monitor import ONSET, monitor_records

TASK = (("channel", "task"),)


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> StoreHandle:
    db = tmp_path_factory.mktemp("monitor_summaries") / "runs.duckdb"
    with Store(db) as store:
        for plant in ("channel_takeover", "garbled"):
            import_records(store, plant, monitor_records(plant, seed=2), content_key=plant)
    return StoreHandle(db)


def _summary_rows(handle: StoreHandle, run: str) -> int:
    with handle.read() as store:
        return int(
            store.con.execute(
                "SELECT count(*) FROM channel_summary WHERE run_id = ?", [store.run_id(run)]
            ).fetchall()[0][0]
        )


def _reference_report(handle: StoreHandle, run: str, monkeypatch) -> monitor.MonitorReport:
    """run_monitors with channel_takeover computed from the tokens (the stored summary bypassed)."""
    with monkeypatch.context() as patch:
        patch.setattr(monitor_channels, "read_step_shares", lambda *args: None)
        patch.setattr(monitor_channels, "stored_step_shares", monitor_channels.channel_step_shares)
        return monitor.run_monitors(handle, run)


@pytest.mark.parametrize("groups", [0, 2])
def test_stored_channel_shares_are_the_reference(planted, groups):
    want, want_rollouts = monitor_channels.channel_step_shares(
        planted, "channel_takeover", "grpo", TASK, "task", groups
    )
    got, got_rollouts = monitor_channels.stored_step_shares(
        planted, "channel_takeover", "grpo", TASK, "task", groups
    )
    again = monitor_channels.stored_step_shares(planted, "channel_takeover", "grpo", TASK, "task", groups)
    assert list(got.columns) == list(want.columns) and set(want.columns) == {"step", "task", "style", "kl"}
    assert got["step"].tolist() == want["step"].tolist()
    np.testing.assert_allclose(
        got.drop(columns="step").to_numpy(), want.drop(columns="step").to_numpy(), rtol=1e-12
    )
    assert sorted(got_rollouts) == sorted(want_rollouts)
    for step, frame in want_rollouts.items():  # the reference sums each rollout in float32
        assert list(got_rollouts[step].index) == list(frame.index)
        pd.testing.assert_frame_equal(got_rollouts[step], frame.astype(np.float64), rtol=1e-6)
    pd.testing.assert_frame_equal(again[0], got)  # read back, not recomputed: the same frame


def test_the_alerts_from_the_summaries_are_the_reference_alerts(planted, monkeypatch):
    for run in ("channel_takeover", "garbled"):
        fast = monitor.run_monitors(planted, run)
        slow = _reference_report(planted, run, monkeypatch)
        assert [
            a.as_dict() | {k: None for k in ("value", "baseline", "noise", "z", "message")}
            for a in fast.alerts
        ] == [
            a.as_dict() | {k: None for k in ("value", "baseline", "noise", "z", "message")}
            for a in slow.alerts
        ]
        for a, b in zip(fast.alerts, slow.alerts, strict=True):
            assert a.value == pytest.approx(b.value, rel=1e-12) and a.z == pytest.approx(b.z, rel=1e-9)
        pd.testing.assert_frame_equal(fast.series, slow.series, rtol=1e-12)
        assert fast.notes == slow.notes
    takeover = [
        a
        for a in monitor.run_monitors(planted, "channel_takeover").alerts
        if a.detector == "channel_takeover"
    ]
    assert [(a.statistic, a.step) for a in takeover] == [("channel_share_style", ONSET)]


def test_the_stored_garbled_share_is_the_scan_of_the_text(planted):
    monitor.run_monitors(planted, "garbled")  # prepares the summaries
    with planted.read() as store:
        stored, scanned = store.con.execute(
            f"SELECT list(s.garbled ORDER BY s.rollout_id), list({GARBLED_SQL} ORDER BY o.rollout_id) "
            "FROM rollouts o JOIN rollout_summary s USING (run_id, rollout_id) WHERE o.run_id = ?",
            [store.run_id("garbled")],
        ).fetchall()[0]
    assert stored == scanned and sum(v > 0 for v in stored) > 10


def test_the_channel_summary_is_dropped_when_the_run_changes(planted, monkeypatch):
    with Store(planted.path) as store:
        import_records(store, "grown", monitor_records("garbled", seed=4), content_key="grown")
    monitor.run_monitors(planted, "grown")
    assert _summary_rows(planted, "grown") > 0
    more = [r for r in monitor_records("garbled", seed=3) if r["step"] == 0]
    for r in more:
        r["step"], r["group"] = 14, f"late-{r['group']}"
    with Store(planted.path) as store:
        import_records(store, "grown", more, content_key="more", append=True)
    kept = _summary_rows(planted, "grown")  # a new step: the other steps' summaries stay (issue 46)
    assert kept > 0
    with Store(planted.path, read_only=True) as store:
        late = store.con.execute(
            "SELECT count(*) FROM channel_summary JOIN rollouts USING (run_id, rollout_id) WHERE step = 14"
        ).fetchall()[0][0]
    assert late == 0
    fast = monitor.run_monitors(planted, "grown")
    assert len(fast.series) == 15 and _summary_rows(planted, "grown") > kept
    slow = _reference_report(planted, "grown", monkeypatch)
    pd.testing.assert_frame_equal(fast.series, slow.series, rtol=1e-12)
