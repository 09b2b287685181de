"""The Explorer and Trends views in AppTest over a real store (the bundled runs): the landing page, its
sort/search/compare controls, and the trend charts drawing `backend.views.explorer.step_trends`' numbers."""

from __future__ import annotations

import json

import numpy as np

from app import keys
from app.view_data import explorer as explorer_data
from backend.store import StoreHandle
from backend.views import explorer
from tests.app.conftest import chart, decode, open_app, open_tab


def table(at):
    (frame,) = [d.value for d in at.dataframe if "rollout_id" in d.value.columns]
    return frame


def test_explorer_is_the_landing_page_with_a_paged_table(app_db):
    at = open_app(app_db)
    assert [t.value for t in at.title] == ["Explorer · demo"]
    frame = table(at)
    assert len(frame) == 50 and frame["rollout_id"].tolist() == list(range(50))
    assert any("448 rollouts match · page 1 of 9" in c.value for c in at.caption)
    assert {"share_other", "share_digits", "max_abs", "repetition", "zero_variance"} <= set(frame.columns)
    at.number_input(key="explorer_page_no").set_value(9).run()
    assert not at.exception
    assert table(at)["rollout_id"].tolist() == list(range(400, 448))


def test_sort_search_and_compare_change_the_table(app_db):
    at = open_app(app_db)
    at.selectbox(key="explorer_sort").set_value("length").run()
    at.toggle(key="explorer_desc").set_value(True).run()
    assert not at.exception
    frame = table(at)
    lengths = frame["length"].tolist()
    assert lengths == sorted(lengths, reverse=True)
    want = explorer.rollout_table(
        StoreHandle(app_db), "demo", explorer.ExplorerQuery(estimator="grpo", sort="length", descending=True)
    )
    assert frame["rollout_id"].tolist() == want.rows["rollout_id"].tolist()
    assert at.query_params["sort"] in ("length", ["length"])

    at.text_input(key="explorer_search").set_value("Obviously").run()
    found = table(at)
    hits = explorer.rollout_table(
        StoreHandle(app_db), "demo", explorer.ExplorerQuery(search="obviously", limit=None)
    )
    assert 0 < hits.total < 448 and any(f"{hits.total} rollouts match" in c.value for c in at.caption)
    assert len(found) == min(hits.total, 50) and set(found["rollout_id"]) <= set(hits.rows["rollout_id"])

    at.selectbox(key="explorer_compare").set_value("entropy").run()
    assert not at.exception
    assert "spearman" in table(at).columns


def test_zero_variance_flag_filter(app_db):
    at = open_app(app_db, opened=(keys.EXPLORER_FILTERS_OPEN,))  # the filters' expander, as a user opens it
    at.radio(key="explorer_flag_zero_variance").set_value("yes").run()
    assert not at.exception
    frame = table(at)
    assert len(frame) and frame["zero_variance"].all()


def test_trends_draw_the_backend_numbers_with_the_toolbar(app_db):
    at = open_app(app_db, "trends")
    assert [t.value for t in at.title] == ["Trends · demo"]
    _every_chart_has_the_toolbar(at)  # the first tab: the rewards
    want = explorer.step_trends(StoreHandle(app_db), "demo", "grpo")
    open_tab(at, keys.TRENDS_TAB, "Where credit goes")
    spec = chart(at, "trends_classes")
    names = [trace["name"] for trace in spec["data"]]
    assert "other" in names and "digits" in names
    digits = next(t for t in spec["data"] if t["name"] == "digits")
    np.testing.assert_allclose(np.asarray(decode(digits["y"]), dtype=float), want["share_digits"], rtol=1e-9)
    _every_chart_has_the_toolbar(at)
    open_tab(at, keys.TRENDS_TAB, "Length, entropy, KL, groups")
    length = chart(at, "trends_length")["data"][0]
    np.testing.assert_allclose(np.asarray(decode(length["y"]), dtype=float), want["length"])
    kl = chart(at, "trends_kl")
    assert len(kl["data"]) == 1  # the demo run has reference logprobs
    _every_chart_has_the_toolbar(at)


def _every_chart_has_the_toolbar(at) -> None:
    assert at.get("plotly_chart")
    for element in at.get("plotly_chart"):
        assert json.loads(element.proto.config).get("displayModeBar") is True


def test_group_view_response_opens_its_rollout(app_db):
    at = open_app(app_db, "group", {"run": "demo", "rollout": "9"})
    assert [t.value for t in at.title] == ["Group 1"]
    (picker,) = at.get("button_group")
    assert picker.options and len(picker.options) == 8
    picker.set_value(12).run()
    assert not at.exception
    assert [t.value for t in at.title] == ["Rollout #12"]
    assert at.session_state["sel_rollout"] == 12 and at.session_state["sel_run"] == "demo"


def test_the_sorted_column_stands_beside_the_rollout_id_once():
    columns = [
        "rollout_id",
        "preview",
        "step",
        "group_id",
        "length",
        "score_task",
        "excess_filler",
        "share_digits",
    ]
    assert explorer_data.reading_order(columns) == columns
    for sort in ("length", "excess_filler", "share_digits"):
        shown = explorer_data.reading_order(columns, sort)
        assert shown[:2] == ["rollout_id", sort] and sorted(shown) == sorted(columns)
    assert explorer_data.reading_order(columns, "rollout_id") == columns
