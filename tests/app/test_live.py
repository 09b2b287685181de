"""Live (issue 46): a run's progress line (`backend.views.live`, the row `creditlens runs --json` prints), the
Live toggle's default (on for a run that grows, `?live=` forcing it) and a warning fired by a step that just
arrived shown as a toast. A page following a run in Chromium while `creditlens watch` imports new steps is
tests/browser/test_live_browser.py."""

from __future__ import annotations

import json

import pytest

from app import keys
from backend.ingest import import_records
from backend.store import Store
from backend.views import live
from tests.app.conftest import open_app
from tests.backend.test_monitor import ONSET, monitor_records
from tests.conftest import make_records, run_cli_here, write_jsonl


def test_the_progress_line_and_what_counts_as_growing():
    grown = live.Progress("r", last_step=11, steps=12, rollouts=96, updated=1000.0, imports=7)
    assert grown.line(now=1004.9) == "step 11 · updated 4 s ago"
    assert grown.line(now=1000.0 + 3 * 3600 + 5) == "step 11 · updated 3 h ago"
    assert [live.ago(s) for s in (0, 59.9, 60, 7200, 2 * 86400)] == ["0 s ago", "59 s ago", "1 min ago"] + [
        "2 h ago",
        "2 d ago",
    ]
    assert grown.growing(now=1000.0 + live.RECENT_SECONDS) and not grown.growing(now=1001.0 + 600)
    once = live.Progress("r", last_step=5, steps=6, rollouts=48, updated=1000.0, imports=1)
    assert not once.growing(now=1001.0)  # imported once (a finished run, the demo): not followed by default
    assert live.Progress("r", None, 0, 0, None, 0).line() == "no steps yet"
    with pytest.raises(Exception, match="no run named 'nope'"):
        live.from_row(None, "nope")


def _runs(db) -> dict:
    listed = run_cli_here("runs", "--db", db, "--json")
    assert listed.returncode == 0, listed.stderr
    return {r["name"]: r for r in json.loads(listed.stdout)}


def test_runs_json_says_when_a_run_last_received_a_step(tmp_path):
    records = make_records(n_groups=2, group_size=3, seed=4, steps=4)
    db = tmp_path / "s.duckdb"
    first = write_jsonl(tmp_path / "a.jsonl", [r for r in records if r["step"] < 2])
    assert run_cli_here("import", first, "--db", db, "--run", "r").returncode == 0
    before = _runs(db)["r"]
    assert (before["last_step"], before["imports"], before["rollouts"]) == (1, 1, 12)
    assert before["updated"] is not None
    more = write_jsonl(tmp_path / "b.jsonl", [r for r in records if r["step"] >= 2])
    assert run_cli_here("import", more, "--db", db, "--run", "r", "--append").returncode == 0
    after = _runs(db)["r"]
    assert (after["last_step"], after["imports"], after["rollouts"]) == (3, 2, 24)
    assert after["updated"] >= before["updated"]
    assert live.from_row(after, "r").growing()  # a step after the first import, just now


def _toggle(at):
    (toggle,) = [t for t in at.sidebar.toggle if t.label == "Live"]
    return toggle


@pytest.mark.parametrize("page", ["trends", "explorer", "runs"])
def test_live_is_off_for_a_run_imported_once_and_a_link_turns_it_on(app_db, page):
    at = open_app(app_db, page, {"run": "demo"})
    assert _toggle(at).value is False
    assert any(c.value.startswith("step ") and "updated" in c.value for c in at.sidebar.caption)
    forced = open_app(app_db, page, {"run": "demo", "live": "1"})
    assert _toggle(forced).value is True
    assert forced.query_params[keys.URL_LIVE_PAGE] == "1"
    assert any("step " in c.value and " · updated " in c.value for c in forced.sidebar.caption)


def test_a_growing_run_is_followed_by_default_and_a_link_can_refuse(app_db, tmp_path):
    records = make_records(n_groups=2, group_size=3, seed=5, steps=3)
    with Store(app_db) as store:
        import_records(store, "growing", [r for r in records if r["step"] < 2], content_key="g0")
        import_records(
            store, "growing", [r for r in records if r["step"] == 2], content_key="g1", append=True
        )
    assert _toggle(open_app(app_db, "trends", {"run": "growing"})).value is True
    assert _toggle(open_app(app_db, "trends", {"run": "growing", "live": "0"})).value is False


def test_a_warning_fired_by_a_new_step_is_a_toast(app_db):
    """The page drawn before the onset has no alert; after the steps that confirm it arrive, the rerun (what
    Live does when the store changed) shows the warning as a toast, once."""
    records = monitor_records("truncation", seed=2)
    with Store(app_db) as store:
        import_records(store, "planted", [r for r in records if r["step"] < ONSET], content_key="p0")
    at = open_app(app_db, "trends", {"run": "planted", "live": "1"})
    assert not at.toast
    with Store(app_db) as store:
        import_records(
            store,
            "planted",
            [r for r in records if ONSET <= r["step"] < ONSET + 3],
            content_key="p1",
            append=True,
        )
    at.run()
    assert not at.exception, at.exception
    toasts = [t.value for t in at.toast]
    assert any("truncation" in t and f"step {ONSET}" in t for t in toasts), toasts
    assert all("INFO" not in t for t in toasts)
    at.run()
    assert not at.toast  # said once


def test_live_says_when_the_estimator_recomputes_the_whole_run(app_db):
    gae = open_app(app_db, "trends", {"run": "demo", "live": "1", "est": "gae"})
    assert any("gae is run-scoped" in c.value for c in gae.caption)
    grpo = open_app(app_db, "trends", {"run": "demo", "live": "1", "est": "grpo"})
    assert not any("run-scoped" in c.value for c in grpo.caption)


def test_a_live_link_to_a_run_without_steps_waits_for_it(app_db):
    """`creditlens watch` prints its address before the trainer wrote a step: the page waits for the run
    (another run shown meanwhile, no warning) and switches to it when its first step lands."""
    at = open_app(app_db, "trends", {"run": "future", "live": "1"})
    assert any("Waiting for run future" in i.value for i in at.sidebar.info)
    assert not any("cannot be honoured" in w.value for w in at.warning)
    with Store(app_db) as store:
        import_records(store, "future", make_records(n_groups=2, group_size=3, seed=6), content_key="f0")
    at.run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Trends · future"
    assert not any("Waiting for run" in i.value for i in at.sidebar.info)
    assert _toggle(at).value is True


def test_a_step_of_a_run_drawn_beside_the_selected_one_changes_what_live_watches(app_db):
    """Trends with runs side by side follows each of them: the fingerprint Live compares changes when the
    second run, not the selected one, receives a step."""
    from app import data  # noqa: PLC0415 - the app's cached reads, outside a page
    from app.ui import live as live_ui  # noqa: PLC0415

    records = make_records(n_groups=2, group_size=3, seed=8, steps=2)
    with Store(app_db) as store:
        import_records(store, "beside", [r for r in records if r["step"] == 0], content_key="b0")
    before = live_ui._fingerprint(str(app_db), ("demo", "beside"))
    with Store(app_db) as store:
        import_records(store, "beside", [r for r in records if r["step"] == 1], content_key="b1", append=True)
    data.invalidate()  # what the ticker's refresh_if_store_changed does when another process committed
    after = live_ui._fingerprint(str(app_db), ("demo", "beside"))
    assert before[0] == after[0] and before[1] != after[1]
