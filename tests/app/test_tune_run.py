"""The Tune view on the whole run (issue 43 item 3): the replay and the effect are `creditlens tune`'s
numbers, the replay's axis starts at the run's first step, thresholds are shown and editable, and Apply makes
the replayed β the session's tuned β (the Rollout view then uses it), written to the URL in a few digits."""

from __future__ import annotations

import pytest

from app import keys
from app.ui import tuned_beta
from backend.store import store_handle
from backend.views import tune
from tests.app.conftest import TUNE_OPEN, chart, decode, open_app, open_tab


def test_tune_view_draws_the_commands_replay_from_the_first_step(app_db):
    at = open_app(app_db, "tune", {"run": "demo", "rollout": "0", "tab": "replay"}, opened=TUNE_OPEN)
    figure = chart(at, "tune_replay")
    steps = {x for trace in figure["data"] for x in decode(trace["x"])}
    assert min(steps) == 0  # before: the β0 row sat at step −1
    betas = at.dataframe[0].value  # β per step (rows) and channel (columns)
    expected = tune.replay(
        store_handle(app_db),
        "demo",
        {c: 0.1 for c in ("format", "length", "process", "style")},
        1.0,
        {c: 1.0 for c in ("format", "length", "process", "style")},
    )
    for r in expected.itertuples(index=False):
        assert betas.loc[r.step, r.channel] == pytest.approx(r.beta)
    assert len(betas) * len(betas.columns) == len(expected)
    # each channel's threshold is shown and editable; raising it counts more violations
    assert at.number_input(key=keys.tune_violation("format")).value == 0.0
    at.number_input(key=keys.tune_violation("format")).set_value(0.5).run()
    assert not at.exception
    traces = {t["name"]: t for t in chart(at, "tune_replay")["data"]}
    rates = decode(traces["format rate (score < 0.5)"]["y"])
    assert list(rates) == [1.0] * len(rates)  # every format score is ≤ 0 < 0.5
    assert chart(at, "tune_effect")["data"]


def test_apply_sets_the_tuned_beta_for_every_view_and_the_url(app_db):
    query = {"run": "demo", "rollout": "0", "eta": "3.3", "tab": "replay"}
    at = open_app(app_db, "tune", query, opened=TUNE_OPEN)
    last = at.dataframe[0].value.iloc[-1]  # β per channel at the last step
    assert last.max() > 3  # beyond the old sliders' end
    at.button(key="tune_apply_replayed").click().run()
    assert not at.exception
    for channel, beta in last.items():
        assert at.slider(key=keys.tune_beta(channel)).value == pytest.approx(beta, rel=1e-3)  # not clamped
    url = at.query_params[keys.URL_TUNED]
    url = url[0] if isinstance(url, list) else url
    assert all(len(part.split(":")[1]) <= 6 for part in url.split(","))  # 4 significant digits
    assert any("tuned β" in i.value for i in at.info)
    # the Rollout view of the same session computes with it, and says so
    at.switch_page("../pages/rollout.py").run()
    assert not at.exception
    assert any("tuned β" in i.value for i in at.info)
    assert tuned_beta.decode(url)["process"] == pytest.approx(last["process"], rel=1e-3)


def test_tuned_beta_round_trips_through_the_url():
    text = tuned_beta.encode({"format": 2.950000047683716, "task": 1.0})
    assert text == "format:2.95,task:1"
    assert tuned_beta.decode(text) == {"format": 2.95, "task": 1.0}
    assert tuned_beta.decode("format:-1") is None and tuned_beta.decode("oops") is None


def test_apply_keeps_the_sliders_beta_of_the_channels_the_replay_does_not_set(app_db):
    """The replay sets the constrained channels' β; every other channel keeps its slider's β, though the
    sliders are not drawn while the replay's tab is open (`sections.lazy_tabs`)."""
    at = open_app(app_db, "tune", {"run": "demo", "rollout": "0"})
    at.slider(key=keys.tune_beta("task")).set_value(2.0).run()  # task: the estimator's channel, no τ
    assert not at.exception
    open_tab(at, keys.TUNE_TAB, "Dual ascent replay · effect on the run")
    assert keys.tune_tau("task") not in {s.key for s in at.slider}
    at.button(key="tune_apply_replayed").click().run()
    assert not at.exception
    assert at.session_state[keys.TUNE_TAB] == "β per channel"  # Apply shows the sliders it set
    assert at.slider(key=keys.tune_beta("task")).value == pytest.approx(2.0)
    url = at.query_params[keys.URL_TUNED]
    assert tuned_beta.decode(url[0] if isinstance(url, list) else url)["task"] == pytest.approx(2.0)
