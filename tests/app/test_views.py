"""Every view under AppTest on a real DuckDB store: no exception, key elements, widgets change results."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from app import keys
from backend.credit import token_classes
from backend.evaluation.calibration import calibration, off_policy_note
from backend.models import engine_note
from backend.store import Store
from tests.app.conftest import (
    COMPARE_OPEN,
    IMG,
    SCRIPT,
    TUNE_OPEN,
    chart,
    decode,
    every_tab,
    heatmap_z,
    open_app,
    open_tab,
    text_blocks,
    token_facts,
)
from tests.app.test_one_truth_views import heatmap_row
from tests.conftest import make_records, write_jsonl


def titles(at) -> list[str]:
    return [t.value for t in at.title]


def test_rollout_opens_on_demo_run_with_heatmap(app_db):
    at = open_app(app_db, "rollout")
    assert titles(at) == ["Rollout #0"]
    assert at.session_state["sel_run"] == "demo"
    spec = chart(at, "rollout_heatmap")
    ticks = spec["layout"]["yaxis"]["ticktext"]
    assert any(t.startswith("task") for t in ticks) and any(t.startswith("final") for t in ticks)
    assert np.isfinite(heatmap_z(spec)).any()
    assert at.query_params["run"] == ["demo"] or at.query_params["run"] == "demo"
    assert chart(at, "rollout_waterfall")["data"][0]["type"] == "waterfall"


def test_rollout_shows_the_process_channel_on_the_wrong_lines(app_db):
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": "0", "est": "grpo"})
    row = heatmap_row(chart(at, "rollout_heatmap"), "process")
    # rollout 0 is "4+8=12 carry 1⏎8+4+1=14 carry 1⏎#### 142": lines 2 and 3 are wrong (13, 132); the step
    # verifier's -1 sits on the tokens that end them, the newline at 31 and the last token at 39
    assert len(row) == 40 and set(np.flatnonzero(row == row.min())) == {31, 39}
    assert row.min() < 0 < row.max()  # group-normalized: the clean tokens sit above the group mean


def test_rollout_estimator_change_changes_heatmap(app_db):
    at = open_app(app_db, "rollout")
    before = heatmap_z(chart(at, "rollout_heatmap"))
    at.selectbox(key="rollout_estimator").set_value("entropy").run()
    assert not at.exception
    after = heatmap_z(chart(at, "rollout_heatmap"))
    assert before.shape == after.shape
    assert not np.allclose(np.nan_to_num(before), np.nan_to_num(after))


def test_estimator_description_and_source_shown_and_old_names_in_links_resolve(app_db):
    # a link from before the rename
    at = open_app(app_db, "rollout", {"run": "oracle", "rollout": "0", "est": "hapo"})
    assert not at.exception
    assert at.selectbox(key="rollout_estimator").value == "entropy_mix"
    assert any("Not HAPO" in c.value for c in at.caption)
    at.selectbox(key="rollout_estimator").set_value("ktae").run()
    assert any("Source:" in c.value and "xiaolizh1/KTAE" in c.value for c in at.caption)
    at = open_app(app_db, "compare", {"run": "oracle", "rollout": "0", "ests": "grpo,trace"})
    assert not at.exception
    assert at.multiselect(key="compare_estimators").value == ["grpo", "decaying_trace"]


def test_url_selects_run_and_rollout_and_shows_true_credit(app_db):
    at = open_app(app_db, "rollout", {"run": "oracle", "rollout": "5", "pos": "3"})
    assert titles(at) == ["Rollout #5"]
    assert at.session_state["sel_rollout"] == 5
    assert at.number_input(key="rollout_pos").value == 3
    ticks = chart(at, "rollout_heatmap")["layout"]["yaxis"]["ticktext"]
    assert any(t.startswith("true credit") for t in ticks)
    (shape,) = chart(at, "rollout_heatmap")["layout"]["shapes"]  # the selected token is outlined
    assert shape["name"] == "selected 3" and shape["x1"] - shape["x0"] >= 1


def test_token_position_changes_why_this_credit(app_db):
    at = open_app(app_db, "rollout", {"run": "oracle", "rollout": "0"})
    first = token_facts(at)
    at.number_input(key="rollout_pos").set_value(3).run()
    assert not at.exception
    assert at.query_params["pos"] in ("3", ["3"])
    assert token_facts(at) != first
    assert "token 3" in [h.value for h in at.subheader if h.value.startswith("Why")][0]
    facts = token_facts(at)
    assert any("no value source" in line for line in facts)  # the oracle run stores no critic values
    assert chart(at, "rollout_heatmap")["layout"]["shapes"][0]["name"] == "selected 3"


def test_group_view_aligned_rows_and_prefix_tree(app_db):
    at = open_app(app_db, "group", {"run": "demo", "rollout": "0"})
    assert titles(at) == ["Group 0"]
    z = heatmap_z(chart(at, "group_heatmap"))
    assert z.shape[0] == 8  # one row per response of the group, cells sized to their tokens
    at.selectbox(key="group_estimator").set_value("entropy").run()
    assert not np.allclose(np.nan_to_num(z), np.nan_to_num(heatmap_z(chart(at, "group_heatmap"))))
    open_tab(at, keys.GROUP_TAB, "Prefix tree")
    tree = chart(at, "group_tree")
    assert tree["data"][0]["type"] == "icicle"


def test_compare_view_multiples_agreement_mass(app_db):
    at = open_app(app_db, "compare", {"run": "oracle", "rollout": "0"}, opened=COMPARE_OPEN)
    chart(at, "compare_multiples")
    open_tab(at, keys.COMPARE_TAB, "Difference of two")
    chart(at, "compare_difference")
    open_tab(at, keys.COMPARE_TAB, "Rank agreement · credit mass by class")
    for key in ("compare_agreement", "compare_mass"):
        chart(at, key)
    mass = at.dataframe[0].value
    names = ("grpo", "entropy", "prefix_tree")
    assert set(mass.columns) == {f"{n} {sign}" for n in names for sign in ("credit", "penalty")}
    for n in names:  # an estimator's credit and penalty over every class: all of its Σ|A|
        assert np.isclose(mass[f"{n} credit"].sum() + mass[f"{n} penalty"].sum(), 1.0)
    assert "key" in mass.index and "other" in mass.index
    at.multiselect(key="compare_estimators").set_value(["grpo", "entropy_mix"]).run()
    assert not at.exception
    assert {c.split()[0] for c in at.dataframe[0].value.columns} == {"grpo", "entropy_mix"}


def test_compare_parameter_form_changes_result(app_db):
    at = open_app(
        app_db,
        "compare",
        {"run": "oracle", "rollout": "0", "ests": "grpo,entropy"},
        opened=(keys.form_open(keys.COMPARE_FORM),),
    )
    before = chart(at, "compare_multiples")
    at.slider(key="compare_cfg_entropy_p").set_value(3.0).run()
    assert not at.exception
    after = chart(at, "compare_multiples")
    assert not np.allclose(
        np.nan_to_num(decode(before["data"][0]["z"])), np.nan_to_num(decode(after["data"][0]["z"]))
    )


def test_tune_beta_slider_changes_heatmap_and_shares(app_db):
    at = open_app(app_db, "tune", {"run": "oracle", "rollout": "0"})
    before = heatmap_z(chart(at, "tune_heatmap"))
    shares_before = decode(chart(at, "tune_shares")["data"][0]["x"])
    at.slider(key="tune_beta_style").set_value(2.5).run()
    assert not at.exception
    assert at.query_params["beta_style"] in ("2.5", ["2.5"])
    assert not np.allclose(np.nan_to_num(before), np.nan_to_num(heatmap_z(chart(at, "tune_heatmap"))))
    assert not np.allclose(shares_before, decode(chart(at, "tune_shares")["data"][0]["x"]))


def test_tune_dual_ascent_replay_reacts_to_tau_and_eta(app_db):
    at = open_app(app_db, "tune", {"run": "demo", "rollout": "0", "tab": "replay"}, opened=TUNE_OPEN)
    table = at.dataframe[0].value
    assert len(table) >= 2
    at.slider(key="tune_eta").set_value(5.0).run()
    assert not at.exception
    assert not at.dataframe[0].value.equals(table)


def test_tune_replay_starts_from_the_current_beta(app_db):
    at = open_app(app_db, "tune", {"run": "demo", "rollout": "0", "tab": "replay"}, opened=TUNE_OPEN)
    table = at.dataframe[0].value
    open_tab(at, keys.TUNE_TAB, "β per channel")
    at.slider(key="tune_beta_style").set_value(2.5).run()
    open_tab(at, keys.TUNE_TAB, "Dual ascent replay · effect on the run")  # the slider's β, its tab closed
    at.button(key="tune_replay_button").click().run()
    assert not at.exception
    assert any(c.value.startswith("Starts from β") and "style 2.5" in c.value for c in at.caption)
    assert not at.dataframe[0].value.equals(table)


def test_tune_compares_against_the_default_beta_and_applies_the_replayed_beta(app_db):
    query = {"run": "oracle", "rollout": "0", "beta_style": "2.0", "base": "difference"}
    at = open_app(app_db, "tune", query, opened=TUNE_OPEN)
    ticks = chart(at, "tune_baseline_heatmap")["layout"]["yaxis"]["ticktext"]
    assert any(t.startswith("style: tuned − default") for t in ticks)
    assert not any(t.startswith("true credit") for t in ticks)  # ground truth has no β
    bands = [np.asarray(decode(t["z"]), dtype=float) for t in chart(at, "tune_baseline_heatmap")["data"]]
    assert max(np.nanmax(np.abs(z)) for z in bands) > 0  # β style 2 against its default: style differs
    open_tab(at, keys.TUNE_TAB, "Dual ascent replay · effect on the run")
    last = float(at.dataframe[0].value["style"].iloc[-1])  # the replay's β at its last step
    at.button(key="tune_apply_replayed").click().run()
    assert not at.exception
    assert at.session_state[keys.TUNE_TAB] == "β per channel"  # Apply shows the sliders it set
    # the tuned β, not clamped to the sliders' old end (3), in the URL's 4 significant digits
    assert at.slider(key="tune_beta_style").value == pytest.approx(last, rel=1e-3)


def test_resample_runs_stores_and_shows_values(app_db):
    # rollout 2: the bundled Monte Carlo teacher did not value it, so its stored values start empty
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "2"})
    at.multiselect(key="resample_positions").set_value([0, 5])
    at.number_input(key="resample_m").set_value(2)
    at.button(key="resample_run").click().run()
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert any("suffixes" in s.value and "stored" in s.value for s in at.success)
    values = chart(at, "resample_values")
    assert list(decode(values["data"][0]["x"])) == [0, 5]
    # stored: a fresh session sees them, and suffix_mc can use them
    again = open_app(app_db, "resample", {"run": "demo", "rollout": "2", "tab": "samples"})  # the tables
    assert len(again.dataframe[0].value) == 2


def test_resample_outlines_the_chosen_positions(app_db):
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "0", "positions": "0,5"})
    assert at.multiselect(key="resample_positions").value == [0, 5]
    assert engine_note("auto") in [c.value for c in at.caption]  # which engine auto is, and what it lacks
    shapes = chart(at, "resample_heatmap")["layout"]["shapes"]
    assert sorted(s["x0"] for s in shapes) == [-0.5, 4.5]


def test_resample_suggestions_fill_positions(app_db):
    at = open_app(app_db, "resample", {"run": "demo", "rollout": "0"})
    at.button(key="resample_suggest_steps").click().run()
    # rollout 0 is "4+8=12 carry 1\n8+4+1=14 carry 1\n#### 142": the states right after each line's end
    assert at.multiselect(key="resample_positions").value == [15, 32]
    at.button(key="resample_suggest_entropy").click().run()
    assert len(at.multiselect(key="resample_positions").value) == 5


def test_oracle_view_metrics_table(app_db):
    at = open_app(app_db, "oracle", {"run": "oracle", "rollout": "0", "ests": "grpo,entropy"})
    chart(at, "oracle_chart")  # the chart first, the table in its own tab
    open_tab(at, keys.ORACLE_TAB, "The numbers")
    table = at.dataframe[0].value
    assert list(table["estimator"]) == ["grpo", "entropy"]
    needs_model = [c.value for c in at.caption if "needs a model" in c.value]
    assert needs_model and all(n in needs_model[0] for n in ("oar_p", "oar_g", "gcpo", "suffix_mc"))
    assert (
        table.set_index("estimator").loc["entropy", "key_recall"]
        > table.set_index("estimator").loc["grpo", "key_recall"]
    )
    at.radio(key="oracle_pipeline").set_value("single").run()
    assert set(at.dataframe[0].value["pipeline"]) == {"single"}


def test_oracle_view_real_run_without_teacher(app_db):
    at = open_app(app_db, "oracle", {"run": "small", "rollout": "0"})
    assert any("No resampled values" in i.value for i in at.info)


def test_runs_list_import_path_and_bad_file(app_db, tmp_path):
    at = open_app(app_db, "runs")
    names = list(at.dataframe[0].value["name"])
    assert {"demo", "oracle", "small"} <= set(names)
    good = write_jsonl(tmp_path / "new.jsonl", make_records(n_groups=1, group_size=2, seed=9))
    at.text_input(key="runs_import_name").set_value("fresh")
    at.radio(key="runs_import_source").set_value("path on this machine").run()
    at.text_input(key="runs_import_path").set_value(str(good))
    at.button(key="runs_import_button").click().run()
    assert not at.exception
    assert any("imported 2 rollouts" in s.value for s in at.success), [s.value for s in at.success]
    assert "fresh" in list(at.dataframe[0].value["name"])

    bad = write_jsonl(tmp_path / "bad.jsonl", [make_records(1, 1)[0], '{"prompt": "p", "response": 3}'])
    at.text_input(key="runs_import_name").set_value("broken")
    at.text_input(key="runs_import_path").set_value(str(bad))
    at.button(key="runs_import_button").click().run()
    assert not at.exception
    assert at.error and "bad.jsonl" in at.error[0].value and "nothing was written" in at.error[0].value
    assert "broken" not in list(at.dataframe[0].value["name"])


def test_runs_delete_needs_confirmation(app_db):
    at = open_app(app_db, "runs")
    at.selectbox(key="runs_delete_name").set_value("small").run()
    assert at.button(key="runs_delete_button").disabled
    at.checkbox(key="runs_delete_confirm").check().run()
    at.button(key="runs_delete_button").click().run()
    assert not at.exception
    assert "small" not in list(at.dataframe[0].value["name"])


@pytest.mark.parametrize("page", ["rollout", "group", "compare", "tune", "resample"])
def test_hostile_text_is_escaped_everywhere(app_db, page):
    at = open_app(app_db, page, {"run": "hostile", "rollout": "0"})
    for _ in every_tab(at, page):  # each tab's content is drawn only while it is open
        _no_hostile_markup(at, page)
    if page == "rollout":
        spec = chart(at, "rollout_heatmap")
        assert any("&lt;script&gt;" in str(t) for t in spec["data"][-1]["customdata"])
        assert any(SCRIPT in v for v in text_blocks(at))  # shown verbatim, as text
        assert not any(SCRIPT in h.value for h in at.html)  # every < escaped in what the browser is sent


def _no_hostile_markup(at, page: str) -> None:
    for element in at.markdown:
        assert SCRIPT not in element.value and IMG not in element.value
        assert not getattr(element.proto, "allow_html", False) or "<" not in element.value
    for c in at.get("plotly_chart"):
        raw = c.proto.spec
        assert "<script" not in raw and "<img" not in raw, page


def test_runs_table_shows_hostile_prompt_as_text(app_db):
    at = open_app(app_db, "runs", {"run": "hostile"})
    assert not any(getattr(m.proto, "allow_html", False) for m in at.markdown)
    assert json.dumps([m.value for m in at.markdown]).count("<script") == 0


def test_oracle_view_teacher_table_on_the_shipped_teacher(app_db):
    at = open_app(app_db, "oracle", {"run": "demo", "rollout": "0", "ests": "grpo,token_rm"}, timeout=300)
    table = at.dataframe[0].value.set_index("estimator")
    assert {"grpo", "token_rm", "chance"} <= set(table.index)
    values = at.dataframe[1].value.set_index("estimator")
    assert {"V: zero", "V: fitted", "V: prefix_tree"} <= set(values.index) and "value_corr" in values
    best = table[table["kind"] == "estimator"]["ranking_accuracy"].idxmax()
    assert table.loc[f"{best} (inverted)", "ranking_accuracy"] < 0.5  # the sanity row under chance
    assert table.loc["grpo", "ranking_accuracy_se"] > 0 and table.loc["grpo", "ranking_accuracy_se_group"] > 0
    assert any("1036 valued positions in 300 rollouts" in c.value for c in at.caption)
    # enough valued positions, and every value on-policy: no warning (`creditlens teacher-bench` prints none)
    with Store(app_db, read_only=True) as store:
        keys = store.rollout_index("demo")
        cal = calibration(
            store, "demo", dict(zip(keys["rollout_id"].astype(int), keys["task"].astype(float), strict=True))
        )
    assert off_policy_note(cal) is None and [w.value for w in at.warning] == []
    shown = at.dataframe[2].value  # the calibration table, the same function's
    pd.testing.assert_frame_equal(shown.reset_index(drop=True), cal, check_dtype=False)
    assert shown["policy"].tolist() == ["on-policy"] * 4
    assert any("ranking_accuracy" in m.value and "higher is better" in m.value for m in at.markdown)
    misses = at.dataframe[3].value
    assert misses["open"].str.startswith("rollout?run=demo&rollout=").all()

    # step 0's suffixes as another model would have stored them: the view warns and marks the step
    with Store(app_db) as store:
        run_id = store.run_id("demo")
        store.con.execute(
            "UPDATE resample_samples SET on_policy = false WHERE run_id = ? AND rollout_id IN "
            "(SELECT rollout_id FROM rollouts WHERE run_id = ? AND step = 0)",
            [run_id, run_id],
        )
        keys = store.rollout_index("demo")
        cal = calibration(
            store, "demo", dict(zip(keys["rollout_id"].astype(int), keys["task"].astype(float), strict=True))
        )
    at = open_app(app_db, "oracle", {"run": "demo", "rollout": "0", "ests": "grpo,token_rm"}, timeout=300)
    assert [w.value for w in at.warning] == [off_policy_note(cal)] and "(steps 0)" in off_policy_note(cal)
    assert at.dataframe[2].value["policy"].tolist() == ["off-policy", "on-policy", "on-policy", "on-policy"]


def test_oracle_view_warns_when_few_positions_are_valued(app_db):
    with Store(app_db) as store:
        store.save_resample(
            "small",
            0,
            pd.DataFrame(
                {
                    "pos": [0, 0, 2, 2],
                    "sample_idx": [0, 1, 0, 1],
                    "seed": [0, 1, 2, 3],
                    "suffix_ids": [[1]] * 4,
                    "suffix_text": ["a"] * 4,
                    "reward": [1.0, 0.0, 0.0, 0.0],
                    "engine": ["t"] * 4,
                    "model": ["m"] * 4,
                }
            ),
        )
    at = open_app(app_db, "oracle", {"run": "small", "rollout": "0", "ests": "grpo"})
    assert any("Only 2 valued positions" in w.value for w in at.warning)


def test_token_classes_in_a_link_are_used_and_stay_in_the_url(app_db):
    classes = (
        token_classes.TokenClass("answer digits", "regex", r"^\d$"),
        token_classes.TokenClass("carry word", "phrases", "carry"),
    )
    link = token_classes.to_link(classes)
    query = {"run": "demo", "rollout": "352", "classes": link, "tab": "agreement"}
    at = open_app(app_db, "compare", query, opened=COMPARE_OPEN)
    assert set(at.dataframe[0].value.index) == {"answer digits", "carry word", "other"}
    assert at.query_params["classes"] in ([link], link)
    assert not at.warning
    with Store(app_db, read_only=True) as store:
        assert "token_classes" not in store.run_info("demo")["meta"]  # a link never writes to the store
    at.switch_page("../pages/rollout.py").run()  # the session keeps them: the Rollout view labels with them
    assert not at.exception
    assert at.query_params["classes"] in ([link], link)
    at.number_input(key="rollout_pos").set_value(0).run()
    facts = token_facts(at)
    assert any(line.startswith("class") and line.split()[-1] in ("digits", "other") for line in facts)


def test_a_link_with_a_bad_token_class_warns_and_uses_the_runs_classes(app_db):
    at = open_app(
        app_db,
        None,
        {"run": "demo", "rollout": "352", "classes": '[["fine","regex","a"],["broken","regex","("]]'},
    )
    (warning,) = [w.value for w in at.warning]  # on the first view the link opens
    assert "classes=" in warning and "broken" in warning and "not a regex" in warning
    for key in COMPARE_OPEN:
        at.session_state[key] = True
    at.session_state[keys.COMPARE_TAB] = "Rank agreement · credit mass by class"
    at.switch_page("../pages/compare.py").run()
    assert not at.exception
    assert "digits" in set(at.dataframe[0].value.index)  # the defaults of the demo run
    assert "classes" not in at.query_params


@pytest.mark.parametrize(
    ("page", "tab", "opened"),
    [
        ("compare", "agreement", COMPARE_OPEN),
        ("tune", "replay", TUNE_OPEN),
        ("trends", None, ("trends_numbers_open",)),
    ],
)
def test_a_fresh_load_sends_no_table_a_closed_expander_hides(app_db, page, tab, opened):
    """A table in a closed expander was mounted and drawn on every fresh load (Compare 5.1 s with its class
    editor and share table, 4.0 s without): those expanders draw their content only once opened
    (`widgets.lazy_expander`), and opening one shows it (in the tab that holds it)."""
    at = open_app(app_db, page, {"run": "demo", "rollout": "0", **({"tab": tab} if tab else {})})
    assert not at.dataframe, [d.value.columns.tolist() for d in at.dataframe]
    for key in opened:
        at.session_state[key] = True
    at.run()
    assert not at.exception
    assert len(at.dataframe) == len(opened)
