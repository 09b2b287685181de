"""A run's main channel, on a real multi-reward TRL log (TRL's own GRPOTrainer, two reward functions, no
`task`): imported with the default (`all`, the sum), every view renders with content and offers the
channel choice, every command works without --channel, and the main channel can be changed at import,
with `creditlens main-channel` and on the Runs page."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from app import keys
from backend.store import Store
from tests.app.conftest import chart, every_tab, heatmap_z, open_app, open_tab, text_blocks
from tests.backend.ingest.trl_logs import DEMO_POLICY
from tests.conftest import run_cli_here

pytestmark = pytest.mark.slow
RUN = "trl"
CHANNELS = ["digits_reward", "newline_reward"]


@pytest.fixture(scope="session")
def trl_completions(trl_plain_log) -> Path:
    """The completion logs of a real 2-step GRPO run with two reward functions (tests/conftest.py)."""
    return trl_plain_log


@pytest.fixture(scope="session")
def trl_template(trl_completions, template_db, tmp_path_factory) -> Path:
    """The app's template store plus the TRL run, imported by the command line with no channel options."""
    path = tmp_path_factory.mktemp("trl_store") / "runs.duckdb"
    shutil.copy(template_db, path)
    done = run_cli_here(
        "import", trl_completions, "--db", path, "--run", RUN, "--model", DEMO_POLICY, "--quiet"
    )
    assert done.returncode == 0
    return path


@pytest.fixture
def trl_db(trl_template, tmp_path) -> Path:
    path = tmp_path / "runs.duckdb"
    shutil.copy(trl_template, path)
    return path


def _runs(db: Path) -> dict[str, dict]:
    done = run_cli_here("runs", "--db", db, "--json")
    assert done.returncode == 0
    return {r["name"]: r for r in json.loads(done.stdout)}


# ---- the command line ----------------------------------------------------------------------------------


def test_import_chooses_the_sum_when_several_rewards_and_no_task(trl_db):
    runs = _runs(trl_db)
    assert runs[RUN]["channels"] == CHANNELS and runs[RUN]["main_channel"] == "all"
    assert runs["demo"]["main_channel"] == "task"  # a run with task keeps it
    done = run_cli_here("main-channel", "--db", trl_db, "--run", RUN)
    assert done.returncode == 0
    assert "main channel all" in done.stdout


def test_import_takes_a_main_channel_and_refuses_an_unknown_one(trl_completions, tmp_path):
    db = tmp_path / "s.duckdb"
    done = run_cli_here(
        "import", trl_completions, "--db", db, "--run", "r", "--main-channel", "newline_reward", "--quiet"
    )
    assert done.returncode == 0
    assert "main channel: newline_reward" in done.stdout
    assert _runs(db)["r"]["main_channel"] == "newline_reward"
    done = run_cli_here(
        "import", trl_completions, "--db", db, "--run", "x", "--main-channel", "task", "--quiet"
    )
    assert done.returncode == 2
    err = done.stderr
    assert "digits_reward, newline_reward" in err and "all" in err
    assert "x" not in _runs(db)  # refused whole: nothing written


def test_every_command_works_without_channel_and_reads_the_main_channel(trl_db, tmp_path):
    out, summed = tmp_path / "default.parquet", tmp_path / "all.parquet"
    done = run_cli_here("estimate", "--db", trl_db, "--run", RUN, "--estimator", "grpo", "--out", out)
    assert done.returncode == 0
    assert (
        run_cli_here(
            "estimate",
            "--db",
            trl_db,
            "--run",
            RUN,
            "--estimator",
            "grpo",
            "--channel",
            "all",
            "--out",
            summed,
        ).returncode
        == 0
    )
    default, total = pd.read_parquet(out), pd.read_parquet(summed)
    assert default["advantage"].abs().sum() > 0
    np.testing.assert_array_equal(default["advantage"], total["advantage"])
    done = run_cli_here("rollouts", "--db", trl_db, "--run", RUN, "--estimator", "grpo", "--json")
    assert done.returncode == 0
    rows = json.loads(done.stdout)
    assert len(rows) == 24 and any(r["max_abs"] for r in rows)
    done = run_cli_here("trends", "--db", trl_db, "--run", RUN, "--estimator", "grpo", "--json")
    assert done.returncode == 0
    steps = json.loads(done.stdout)
    assert [s["step"] for s in steps] == [1, 2] and all(s["q50"] is not None for s in steps)
    done = run_cli_here(
        "explain", "--db", trl_db, "--run", RUN, "--rollout", 3, "--estimator", "grpo", "--pos", 0, "--json"
    )
    assert done.returncode == 0
    explained = json.loads(done.stdout)
    # The credit is split whatever the channel looked at (issue 43): a row per reward channel, each with its
    # derivation; `all` (the scores summed first, what TRL trains on) is a labelled what-if beside it.
    assert explained["channel"] == "all" and "all" not in explained["channels"]
    assert len(explained["channels"]) >= 2
    assert all(c["derivation"]["lines"] for c in explained["channels"].values())
    assert explained["terms"]["config"]["channel"] == "all" and explained["derivation"]["lines"]
    assert "what-if" in explained["what_if"]["label"]
    summed_3 = total["advantage"][total["rollout_id"] == 3]
    np.testing.assert_allclose(explained["what_if"]["advantage"], summed_3, atol=1e-6)
    done = run_cli_here("logged-gap", "--db", trl_db, "--run", RUN, "--set", "epsilon=1e-4", "--json")
    assert done.returncode == 0
    gaps = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(gaps) == 24 and max(abs(g["gap"]) for g in gaps) < 1e-5  # TRL's own advantage: the sum


def test_a_missing_channel_lists_the_runs_channels_and_hints_all(trl_db, tmp_path):
    for command in (
        ["estimate", "--out", tmp_path / "x.parquet"],
        ["logged-gap"],
        ["rollouts", "--json"],
        ["trends", "--json"],
        ["explain", "--rollout", 0],
    ):
        done = run_cli_here(
            *command[:1],
            "--db",
            trl_db,
            "--run",
            RUN,
            "--estimator",
            "grpo",
            "--channel",
            "task",
            *command[1:],
        )
        assert done.returncode == 2, command
        err = done.stderr
        assert "no scores for channel 'task'" in err and "digits_reward, newline_reward" in err, err
        assert "--channel all" in err, err


def test_teacher_bench_reads_the_main_channel(trl_db, tmp_path):
    assert (
        run_cli_here(
            "resample",
            "--db",
            trl_db,
            "--run",
            RUN,
            "--rollout",
            2,
            "--positions",
            "1,3",
            "--samples",
            2,
            "--verifier",
            "tests.backend.ingest.trl_logs:has_newline",
            "--model",
            DEMO_POLICY,
            "--json",
        ).returncode
        == 0
    )
    out = tmp_path / "bench.json"
    assert (
        run_cli_here(
            "teacher-bench",
            "--db",
            trl_db,
            "--run",
            RUN,
            "--estimators",
            "grpo",
            "prefix_tree",
            "--json",
            out,
        ).returncode
        == 0
    )
    bench = json.loads(out.read_text())
    assert {r["estimator"] for r in bench["rows"]} >= {"grpo", "prefix_tree", "V: zero", "V: prefix_tree"}
    assert not [s for s in bench["skipped"] if "channel" in s], bench["skipped"]  # only: no critic values
    done = run_cli_here("teacher-bench", "--db", trl_db, "--run", RUN, "--channel", "task")
    assert done.returncode == 2
    assert "--channel all" in done.stderr


def test_changing_the_main_channel_changes_every_default(trl_db, tmp_path):
    assert run_cli_here("main-channel", "--db", trl_db, "--run", RUN, "digits_reward").returncode == 0
    assert _runs(trl_db)[RUN]["main_channel"] == "digits_reward"
    out, chosen = tmp_path / "default.parquet", tmp_path / "digits.parquet"
    done = run_cli_here("estimate", "--db", trl_db, "--run", RUN, "--estimator", "grpo", "--out", out)
    assert done.returncode == 0
    assert (
        run_cli_here(
            "estimate",
            "--db",
            trl_db,
            "--run",
            RUN,
            "--estimator",
            "grpo",
            "--channel",
            "digits_reward",
            "--out",
            chosen,
        ).returncode
        == 0
    )
    np.testing.assert_array_equal(pd.read_parquet(out)["advantage"], pd.read_parquet(chosen)["advantage"])
    done = run_cli_here(
        "explain", "--db", trl_db, "--run", RUN, "--rollout", 3, "--estimator", "grpo", "--json"
    )
    assert done.returncode == 0
    explained = json.loads(done.stdout)
    assert explained["channel"] == "digits_reward"
    assert set(explained["channels"]) == set(CHANNELS)  # the other channel keeps its own projection
    # the Explorer's zero-variance flag follows the main channel: digits_reward has None for the first two
    # completions of every group, so a group is flat when its last two agree
    with Store(trl_db, read_only=True) as store:
        index = store.rollout_index(RUN)
        flags = store.con.execute(
            "SELECT rollout_id, zero_variance FROM rollout_summary WHERE run_id = ? ORDER BY 1",
            [store.run_id(RUN)],
        ).df()
    flat = index.groupby("group_id")["digits_reward"].agg(lambda s: s.dropna().nunique() <= 1)
    assert flags["zero_variance"].tolist() == index["group_id"].map(flat).tolist()
    done = run_cli_here("main-channel", "--db", trl_db, "--run", RUN, "nope")
    assert done.returncode == 2
    assert "digits_reward, newline_reward, or all" in done.stderr


# ---- the views -----------------------------------------------------------------------------------------


def _open(db: Path, page: str, **query):
    return open_app(db, page, {"run": RUN, "rollout": "3", **query})


def _texts(at) -> str:
    """Every text element of the page, markdown escapes removed."""
    return " ".join(
        str(e.value)
        for kind in ("markdown", "caption", "text", "info", "error", "warning")
        for e in at.get(kind)
    ).replace("\\", "")


@pytest.mark.parametrize(
    "page", ["explorer", "trends", "rollout", "group", "compare", "tune", "resample", "oracle", "runs"]
)
def test_every_view_renders_the_multi_reward_run(trl_db, page):
    at = _open(trl_db, page)
    assert not at.exception, [e.message for e in at.exception]
    assert not at.error, [e.value for e in at.error]
    assert "no scores for channel" not in _texts(at)
    for label in every_tab(at, page):  # each tab's content is drawn only while it is open
        assert not at.error, (label, [e.value for e in at.error])
        assert "no scores for channel" not in _texts(at), label
    if page == "compare":  # one credit picker: the final A, a channel's term, the scores summed first
        picker = at.selectbox(key="compare_credit")
        assert picker.value == "final" and "what-if: scores summed first" in picker.options
    elif page not in ("resample", "oracle", "runs"):
        picker = at.selectbox(key=f"{page}_channel")
        assert picker.options == [*CHANNELS, "all (sum, main)"]
        assert picker.value == "all"


def test_a_trl_run_opens_on_the_advantage_trl_trained_on(trl_db):
    """The views open on as_trained: the Rollout view's final advantage is TRL's logged one, and the
    caption says it is the trainer's; grpo beside it is labelled a what-if."""
    at = _open(trl_db, "rollout")
    assert at.selectbox(key="rollout_estimator").value == "as_trained"
    assert "as trained by TRL GRPOTrainer" in _texts(at)
    with Store(trl_db, read_only=True) as store:
        logged = store.rollout(RUN, 3)["logged_advantage"]
    assert abs(float(heatmap_z(chart(at, "rollout_heatmap"))[-1][0]) - logged) < 1e-6  # the final row
    assert _open(trl_db, "explorer").selectbox(key="explorer_estimator").value == "as_trained"
    what_if = _open(trl_db, "rollout", est="grpo")
    assert "what-if: Credit Lens's recombination with grpo" in _texts(what_if)


def test_explorer_and_trends_show_credit_on_the_main_channel(trl_db):
    at = _open(trl_db, "explorer", est="grpo")
    table = at.dataframe[0].value
    assert len(table) == 24 and table["max_abs"].abs().sum() > 0
    assert "--channel all" in " ".join(text_blocks(at))
    at.selectbox(key="explorer_channel").set_value("newline_reward").run()
    assert not at.exception
    # the table's credit is the final advantage's (issue 43): the channel picked does not change it
    assert np.allclose(at.dataframe[0].value["max_abs"], table["max_abs"])
    at = _open(trl_db, "trends", tab="behaviour", est="grpo")
    assert any("advantages on all" in (c.help or "") for c in at.caption)  # the quantiles' definition
    assert "summed score does not vary" in json.dumps(chart(at, "trends_groups"))  # not "zero all variance"


def test_rollout_opens_split_on_the_summed_main_channel_and_keeps_its_final(trl_db):
    """Issue 43: a two-reward run whose main channel is `all` opens with every channel's row (the summed
    estimator a labelled what-if row beside the final), and picking a channel never changes the final."""
    at = _open(trl_db, "rollout", est="grpo")
    ticks = chart(at, "rollout_heatmap")["layout"]["yaxis"]["ticktext"]
    for c in CHANNELS:
        assert any(t.startswith(c) for t in ticks), ticks
    assert any(t.startswith("final") for t in ticks) and any(t.startswith("what-if") for t in ticks)
    assert "(G = 3)" in " ".join(text_blocks(at))  # Z over the group's three scored responses
    assert "what-if" in _texts(at) and "baseline A_final stays" in _texts(at)
    final = at.metric[0].value
    at.selectbox(key="rollout_channel").set_value("digits_reward").run()
    assert not at.exception
    ticks = chart(at, "rollout_heatmap")["layout"]["yaxis"]["ticktext"]
    assert any(t.startswith("digits_reward") for t in ticks) and any(t.startswith("newline") for t in ticks)
    assert not any(t.startswith("what-if") for t in ticks)
    assert at.metric[0].value == final


def test_the_channel_choice_holds_across_views(trl_db):
    at = _open(trl_db, "explorer")
    at.selectbox(key="explorer_channel").set_value("newline_reward").run()
    at.switch_page("../pages/group.py").run()
    assert not at.exception
    assert at.selectbox(key="group_channel").value == "newline_reward"
    assert at.query_params["channel"] in ("newline_reward", ["newline_reward"])


def test_a_link_chooses_the_channel_and_a_bad_one_warns(trl_db):
    at = _open(trl_db, "rollout", channel="digits_reward")
    assert at.selectbox(key="rollout_channel").value == "digits_reward"
    at = open_app(trl_db, None, {"run": RUN, "channel": "task"})  # the Explorer, the landing page
    assert at.selectbox(key="explorer_channel").value == "all"
    assert any("channel=task" in w.value and "main channel all" in w.value for w in at.warning)


def test_group_labels_the_estimator_and_scores_by_channel(trl_db):
    at = _open(trl_db, "group")
    assert at.selectbox(key="group_estimator").label == "Estimator"
    assert "Task-channel" not in _texts(at)
    rows = chart(at, "group_heatmap")["layout"]["yaxis"]["ticktext"]
    assert any("R=+" in r for r in rows) and any("R=none" in r for r in rows)  # #0 has no score at all
    assert not any("nan" in r for r in rows)
    assert np.isfinite(heatmap_z(chart(at, "group_heatmap"))).any()


def test_tune_maximizes_the_chosen_channel(trl_db):
    at = _open(trl_db, "tune")
    assert not at.exception
    # a run whose main channel is the sum opens split (issue 43): a β for every channel
    assert {s.label for s in at.slider} >= {"β digits_reward", "β newline_reward"}
    at.selectbox(key="tune_channel").set_value("digits_reward").run()
    assert not at.exception
    assert {s.label for s in at.slider} >= {"β digits_reward", "β newline_reward"}
    open_tab(at, keys.TUNE_TAB, "Dual ascent replay · effect on the run")
    assert "τ newline_reward" in {s.label for s in at.slider}


def test_runs_page_changes_the_main_channel(trl_db):
    at = _open(trl_db, "runs")
    box = at.selectbox(key=f"runs_main_channel_{RUN}")
    assert box.value == "all"
    box.set_value("newline_reward").run()
    at.button(key="runs_main_channel_button").click().run()
    assert not at.exception
    with Store(trl_db, read_only=True) as store:
        assert store.main_channel(RUN) == "newline_reward"
    at.switch_page("../pages/rollout.py").run()
    assert at.selectbox(key="rollout_channel").value == "newline_reward"


def test_runs_page_imports_with_channels_and_main_channel(trl_db, trl_completions, monkeypatch):
    monkeypatch.setenv("CREDITLENS_IMPORT_ROOTS", str(trl_completions.parent))
    at = open_app(trl_db, "runs")
    at.text_input(key="runs_import_name").set_value("picked")
    at.radio(key="runs_import_source").set_value("path on this machine").run()
    at.text_input(key="runs_import_path").set_value(str(trl_completions))
    at.text_input(key="runs_import_channels").set_value("digits_reward")  # one channel: TRL's `task`
    at.text_input(key="runs_import_main_channel").set_value("digits_reward")
    at.button(key="runs_import_button").click().run()
    assert "has no such channel; its channels: task, or all" in at.error[0].value  # and nothing written
    at.text_input(key="runs_import_channels").set_value("newline_reward, digits_reward")
    at.text_input(key="runs_import_main_channel").set_value("newline_reward")
    at.button(key="runs_import_button").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert "main channel: newline_reward" in at.success[0].value.replace("\\", "")
    with Store(trl_db, read_only=True) as store:
        info = {r["name"]: r for r in store.list_runs()}["picked"]
    assert info["channels"] == CHANNELS and info["main_channel"] == "newline_reward"
