"""Small fixes in the views, each with a test that failed before it."""

from __future__ import annotations

from app import keys
from backend.store import Store
from tests.app.conftest import open_app, open_tab


def test_the_sidebar_rollout_label_puts_the_score_before_what_a_narrow_sidebar_cuts(app_db):
    at = open_app(app_db, None, {"run": "demo"})
    picker = at.selectbox(key="sel_rollout")
    label = picker.format_func(picker.value) if hasattr(picker, "format_func") else picker.options[0]
    assert label.startswith("#0 · task "), label  # the score right after the id


def test_the_sidebar_lists_one_steps_rollouts_and_a_new_step_selects_its_first(app_db):
    # A training run has thousands of rollouts: the Rollout picker lists those of the selected one's step.
    with Store(app_db, read_only=True) as store:
        index = store.rollout_index("demo")
    by_step = index.groupby("step")["rollout_id"].apply(list).to_dict()
    assert len(by_step) > 1
    rollout = int(index["rollout_id"].iloc[len(index) // 2])
    step = int(index.loc[index["rollout_id"] == rollout, "step"].iloc[0])
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": str(rollout)})
    assert at.selectbox(key=keys.STEP).value == step
    assert at.selectbox(key=keys.ROLLOUT).value == rollout
    assert len(at.selectbox(key=keys.ROLLOUT).options) == len(by_step[step]) < len(index)
    other = next(s for s in by_step if s != step)
    at.selectbox(key=keys.STEP).set_value(other).run()
    assert not at.exception, at.exception
    assert at.session_state[keys.ROLLOUT] == by_step[other][0]
    assert at.title[0].value == f"Rollout #{by_step[other][0]}"
    assert at.selectbox(key=keys.STEP).value == other
    # a rollout chosen elsewhere (a link, the Explorer) moves the step with it
    at.selectbox(key=keys.ROLLOUT).set_value(by_step[other][1]).run()
    assert at.selectbox(key=keys.STEP).value == other


def test_compare_on_a_zero_variance_group_says_why_its_panels_are_empty(app_db):
    query = {"run": "demo", "rollout": "8", "credit": "channel:task"}  # group 1: every task score the same
    at = open_app(app_db, "compare", query)
    assert any("zero-variance group" in i.value for i in at.info), [i.value for i in at.info]
    # its final A is the token-level channels' terms alone, which no estimator changes: said so
    at = open_app(app_db, "compare", {"run": "demo", "rollout": "8"})
    assert any("the same final A" in i.value for i in at.info), [i.value for i in at.info]
    at = open_app(app_db, "compare", {"run": "demo", "rollout": "0"})
    assert not any("zero-variance group" in i.value or "the same" in i.value for i in at.info)


def test_unavailable_estimators_say_the_fix_that_works_here(app_db):
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": "0"})
    lines = [line for m in at.markdown for line in m.value.splitlines()]  # one list, a line per estimator
    notes = {line.split("**")[1]: line for line in lines if line.startswith("- **")}
    assert "logged" in notes, list(notes)
    assert "creditlens score" not in notes["logged"]  # a model cannot make a trainer's advantage
    assert "`logged_advantage`" in notes["logged"]  # code spans render as code, not literal backticks
    assert "\\`" not in notes["logged"]
    for name in ("oar_p", "oar_g", "gcpo"):
        if name in notes:
            assert "Resample view" in notes[name], notes[name]


def test_trends_percent_axes_read_small_shares_and_an_unknown_share_says_so(app_db):
    import numpy as np  # noqa: PLC0415

    from tests.app.conftest import chart, decode  # noqa: PLC0415

    at = open_app(app_db, "trends", {"run": "demo", "tab": "behaviour"})
    repetition = chart(at, "trends_repetition")
    values = np.asarray(decode(repetition["data"][0]["y"]), dtype=float)
    assert 0 < np.nanmax(values) < 0.05  # small shares: ".0%" ticks read 0% everywhere
    assert repetition["layout"]["yaxis"]["tickformat"] == ".3~p"
    groups = chart(at, "trends_groups")
    names = [t["name"] for t in groups["data"]]
    assert "truncated responses" not in names  # the demo's log says nothing about truncation
    # said in the legend beside the other lines, not under the chart's title (issue 43)
    assert "truncated responses: no data in this run" in names
    assert not any("no data" in a.get("text", "") for a in groups["layout"].get("annotations", []))


def test_sorting_by_a_credit_column_without_an_estimator_says_to_add_one(app_db):
    from tests.conftest import run_cli_here  # noqa: PLC0415

    done = run_cli_here("rollouts", "--db", app_db, "--run", "demo", "--sort=-share_style_span", "--json")
    assert done.returncode == 2
    assert "add --estimator NAME" in done.stderr, done.stderr
    ok = run_cli_here(
        "rollouts",
        "--db",
        app_db,
        "--run",
        "demo",
        "--estimator",
        "grpo",
        "--sort=-share_filler",
        "--limit",
        "3",
        "--json",
    )
    assert ok.returncode == 0, ok.stderr


def test_the_import_summary_keeps_its_line_breaks(app_db):
    from streamlit.testing.v1 import AppTest  # noqa: PLC0415

    from tests.app.conftest import MAIN  # noqa: PLC0415

    at = AppTest.from_file(str(MAIN), default_timeout=120)
    at.session_state["app_db"] = str(app_db)
    at.run()
    at.switch_page("../pages/runs.py")
    at.session_state["runs_flash"] = "r_1: imported 4 rollouts\n  skipped 2 records already in the run"
    at.run()
    (message,) = [s.value for s in at.success]
    assert "rollouts  \n" in message and "r\\_1" in message  # a hard break; the name's markdown escaped


def test_resample_opens_on_the_stored_positions_and_says_where_its_samples_come_from(app_db):
    from backend.store import Store  # noqa: PLC0415

    with Store(app_db, read_only=True) as store:
        values = store.resample_values("demo")
    rid = int(values["rollout_id"].iloc[0])  # a rollout the shipped teacher valued
    stored = sorted(int(p) for p in values.loc[values["rollout_id"] == rid, "pos"])
    at = open_app(app_db, "resample", {"run": "demo", "rollout": str(rid)})
    assert sorted(at.multiselect(key="resample_positions").value) == stored  # what the chart shows
    assert any("pools every sample stored" in c.value for c in at.caption)
    open_tab(at, keys.RESAMPLE_TAB, "The values and the suffixes, as tables")
    frames = [t.value for t in at.dataframe]
    assert any({"engine", "model", "created"} <= set(f.columns) for f in frames)  # each sample's source


def test_a_folder_of_native_jsonl_is_imported_as_native(app_db, tmp_path):
    """A folder of native JSONL step files is native (a trainer's recorder writes them), not a verl dump."""
    from tests.conftest import make_records, run_cli_here, write_jsonl  # noqa: PLC0415

    folder = tmp_path / "native_steps"
    folder.mkdir()
    write_jsonl(folder / "0.jsonl", make_records(n_groups=1, group_size=2))
    done = run_cli_here("import", folder, "--db", app_db, "--run", "native_folder")
    assert done.returncode == 0, done.stderr
    assert "detected format: native" in done.stderr and "imported 2 rollouts" in done.stdout
