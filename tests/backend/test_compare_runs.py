"""Runs side by side (issue 45): multi-run trends are each run's own single-run rows, and `compare-runs` gives
the monitors' onset of a planted pathology in `first_alert_step` (null on a healthy run), the run's numbers
as its trends give them, and the configuration keys that differ. Runs from the monitor tests' generator."""

from __future__ import annotations

import json

import pandas as pd
import pytest

import creditlens
from backend.cli import compare_runs as cli_compare
from backend.core import run_config
from backend.ingest import import_records
from backend.monitor import compare_runs
from backend.store import Store, StoreHandle
from backend.views import compare_runs as compare_rows
from backend.views import explorer
from tests.backend.test_monitor import ONSET, monitor_records
from tests.conftest import run_cli_here

RUNS = ("healthy", "entropy_collapse", "truncation")


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    """A healthy run and two with a pathology planted at step ONSET; the first two with a stored config
    that differs in one key (and one nested key), the third with none."""
    path = tmp_path_factory.mktemp("compare_runs") / "runs.duckdb"
    with Store(path) as store:
        import_records(store, "healthy", monitor_records(None, seed=0), content_key="healthy")
        for plant in RUNS[1:]:
            import_records(store, plant, monitor_records(plant, seed=2), content_key=plant)
        base = {"beta": 0.04, "learning_rate": 1e-6, "model": {"name": "tiny", "dtype": "bf16"}}
        store.set_run_meta("healthy", run_config.CONFIG_KEY, base)
        store.set_run_meta(
            "entropy_collapse",
            run_config.CONFIG_KEY,
            {**base, "beta": 0.0, "model": {"name": "tiny", "dtype": "fp32"}},
        )
        store.set_run_meta("entropy_collapse", run_config.SOURCE_KEY, "trl args")
    return path


@pytest.fixture(scope="module")
def printed(db) -> list[dict]:
    """`creditlens compare-runs --json` on the three runs, as printed."""
    done = run_cli_here("compare-runs", "--db", db, *[a for r in RUNS for a in ("--run", r)], "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.fixture(scope="module")
def compared(printed) -> pd.DataFrame:
    return pd.DataFrame(printed)


def _command_rows(*args) -> list[dict]:
    done = run_cli_here("trends", *args, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


@pytest.mark.slow
def test_multi_run_trends_rows_are_each_runs_own_command(db):
    both = _command_rows("--db", db, "--run", "truncation", "--run", "healthy", "--estimator", "grpo")
    assert [r["run"] for r in both] == ["truncation"] * 14 + ["healthy"] * 14  # the order given
    for run in ("truncation", "healthy"):
        own = _command_rows("--db", db, "--run", run, "--estimator", "grpo")
        mine = [{k: v for k, v in r.items() if k != "run"} for r in both if r["run"] == run]
        assert mine == own, run
        assert "run" not in own[0]  # one run: the table as it always was
    assert {"share_filler", "q50", "kl"} <= set(both[0])
    # the Python API returns the same table
    lens_rows = creditlens.open(db).trends(["truncation", "healthy"], estimator="grpo")
    assert json.loads(lens_rows.to_json(orient="records", double_precision=15)) == both


def test_multi_run_trends_refuse_a_run_twice_and_name_an_unknown_one(db):
    done = run_cli_here("trends", "--db", db, "--run", "healthy", "--run", "healthy", "--json")
    assert done.returncode == 2 and "'healthy': given twice" in done.stderr
    done = run_cli_here("trends", "--db", db, "--run", "healthy", "--run", "nope", "--json")
    assert done.returncode == 2 and "no run named 'nope'" in done.stderr and "healthy" in done.stderr


def test_first_alert_step_is_the_planted_onset_and_null_when_healthy(printed):
    rows = {row["run"]: row for row in printed}
    assert list(rows) == list(RUNS)
    healthy = rows["healthy"]
    assert healthy["first_alert_step"] is None and healthy["first_alert_detector"] is None  # JSON null
    assert healthy["warnings"] == 0
    for plant in RUNS[1:]:
        assert rows[plant]["first_alert_step"] == ONSET, plant
        assert rows[plant]["first_alert_detector"] == plant
        assert rows[plant]["warnings"] >= 1


def test_alerts_are_each_runs_warnings_from_its_first_alert_step(db, printed):
    """`compare-runs --alerts`: every warning, the earliest of each run being its first_alert_step; the
    Python API gives the same rows; the Trends view marks them on each run's line."""
    done = run_cli_here(
        "compare-runs", "--db", db, *[a for r in RUNS for a in ("--run", r)], "--alerts", "--json"
    )
    assert done.returncode == 0, done.stderr
    alerts = json.loads(done.stdout)
    rows = {row["run"]: row for row in printed}
    assert "healthy" not in {a["run"] for a in alerts}
    for plant in RUNS[1:]:
        mine = [a for a in alerts if a["run"] == plant]
        assert len(mine) == rows[plant]["warnings"], plant
        assert [a["step"] for a in mine] == sorted(a["step"] for a in mine)
        assert (mine[0]["step"], mine[0]["detector"]) == (ONSET, plant)
        assert {a["severity"] for a in mine} <= {"warn", "alert"}
    api = creditlens.open(db).compare_alerts(list(RUNS))
    assert json.loads(api.to_json(orient="records")) == alerts

    # the figure: a ▼ trace per run with warnings, on the run's smoothed line at those steps
    from app.ui import run_charts  # noqa: PLC0415 - the view's figure, drawn from the same rows

    raw = compare_rows.run_trends(StoreHandle(db), list(RUNS), "grpo", {}, None)
    smooth = compare_rows.smooth(raw, 0.6)
    fig = run_charts.runs_trend(raw, smooth, "mean_entropy", "entropy", alerts=api)
    marks = {t.name: t for t in fig.data if t.name.endswith(" warnings")}
    assert set(marks) == {f"{plant} warnings" for plant in RUNS[1:]}
    for plant in RUNS[1:]:
        line = smooth[smooth["run"] == plant].set_index("step")["mean_entropy"]
        mark = marks[f"{plant} warnings"]
        assert ONSET in mark.x
        assert list(mark.y) == [float(line[s]) for s in mark.x]
        assert plant in mark.hovertext[list(mark.x).index(ONSET)]
    empty = run_charts.runs_trend(raw, smooth, "mean_entropy", "entropy", alerts=api.iloc[:0])
    assert not [t for t in empty.data if t.name.endswith(" warnings")]


def test_the_row_holds_the_runs_trends_numbers(db, compared):
    handle = StoreHandle(db)
    row = compared.set_index("run").loc["truncation"]
    trends = explorer.step_trends(handle, "truncation", "grpo", (("channel", "task"),))
    assert (row["steps"], row["rollouts"], row["first_step"], row["last_step"]) == (14, 14 * 40, 0, 13)
    assert row["tokens"] > 14 * 40 * 30
    last, first = trends.iloc[-1], trends.iloc[0]
    assert row["last_score_task"] == pytest.approx(last["score_task"])
    assert row["best_score_task"] == pytest.approx(trends["score_task"].max())
    assert row["best_score_task"] > row["last_score_task"] or trends["score_task"].idxmax() == 13
    for name in ("mean_entropy", "kl", "length"):
        assert row[f"last_{name}"] == pytest.approx(last[name]), name
    assert row["first_share_filler"] == pytest.approx(first["share_filler"])
    assert row["last_share_filler"] == pytest.approx(last["share_filler"])
    assert row["last_share_filler"] != pytest.approx(row["first_share_filler"])


def test_the_configuration_keys_that_differ(compared):
    rows = compared.set_index("run")
    differing = sorted(c for c in compared.columns if c.startswith("config."))
    assert differing == ["config.beta", "config.model.dtype"]  # learning_rate and model.name agree
    assert rows.loc["healthy", "config.beta"] == 0.04 and rows.loc["entropy_collapse", "config.beta"] == 0.0
    assert rows.loc["entropy_collapse", "config.model.dtype"] == "fp32"
    assert pd.isna(rows.loc["truncation", "config.beta"])  # nothing stored: not compared, shown empty
    assert rows.loc["truncation", "config"] == {}
    assert rows.loc["entropy_collapse", "config_source"] == "trl args"
    assert rows.loc["healthy", "config"]["model.name"] == "tiny"


def test_the_python_api_and_the_text_table_give_the_same_rows(db, compared):
    lens = creditlens.open(db).compare(list(RUNS))
    assert json.loads(lens.to_json(orient="records", double_precision=15)) == json.loads(
        compared.to_json(orient="records", double_precision=15)
    )
    lines = cli_compare.as_text(lens).splitlines()  # what the command prints without --json
    assert lines[0].split() == list(RUNS)
    assert next(line for line in lines if line.startswith("first_alert_step")).split()[1:] == ["-", "9", "9"]
    assert next(line for line in lines if line.startswith("config.beta")).split()[1:] == ["0.04", "0.0", "-"]


def test_compare_runs_function_errors_name_the_run(db):
    handle = StoreHandle(db)
    with pytest.raises(Exception, match="no run named 'nope'"):
        compare_runs.compare_runs(handle, ["healthy", "nope"])
    done = run_cli_here("compare-runs", "--db", db, "--run", "healthy", "--estimator", "nope")
    assert done.returncode == 2 and "nope" in done.stderr and "grpo" in done.stderr


def test_flatten_and_differing_keys():
    flat = run_config.flatten({"a": {"b": 1, "c": [1, 2]}, "d": None})
    assert flat == {"a.b": 1, "a.c": "[1, 2]", "d": None}
    assert run_config.differing_keys({"x": {"k": 1}, "y": {"k": 1.0}}) == []  # 1 and 1.0: the same setting
    assert run_config.differing_keys({"x": {"k": 1}, "y": {"k": True}}) == ["k"]
    assert run_config.differing_keys({"x": {"k": 1}, "y": {}}) == []  # y stores nothing
    assert run_config.differing_keys({"x": {"k": 1}, "y": {"j": 1}}) == ["j", "k"]


def test_smoothing_is_each_runs_own_debiased_ema(db):
    runs = ("--db", db, "--run", "healthy", "--run", "truncation")
    raw = pd.DataFrame(_command_rows(*runs))
    smoothed = pd.DataFrame(_command_rows(*runs, "--smooth", "0.6"))
    kept = ["run", "step", "tokens_seen", "rollouts", "groups"]
    assert smoothed[kept].equals(raw[kept])
    for run in ("healthy", "truncation"):
        x = raw.loc[raw["run"] == run, "length"].to_numpy()
        s = smoothed.loc[smoothed["run"] == run, "length"].to_numpy()
        assert s[0] == pytest.approx(x[0])  # each run starts from its own first value, not the other run's
        assert s[1] == pytest.approx((0.6 * x[0] + x[1]) / 1.6)
        assert s[-1] != pytest.approx(x[-1])
    done = run_cli_here("trends", *runs, "--smooth", "1", "--json")
    assert done.returncode == 2 and "--smooth 1: an EMA weight in [0, 1)" in done.stderr


def test_smoothing_keeps_gaps_and_differing_columns_ignore_equal_ones():
    kl = pd.Series([1.0, float("nan"), 3.0], dtype="float32")  # DuckDB's FLOAT columns come as float32
    frame = pd.DataFrame({"run": ["a"] * 3, "step": [0, 1, 2], "kl": kl})
    assert compare_rows.smooth(frame, 0.5)["kl"].tolist()[::2] == pytest.approx([1.0, (0.5 + 3) / 1.5])
    assert pd.isna(compare_rows.smooth(frame, 0.5)["kl"].iloc[1])
    rows = pd.DataFrame({"run": ["a", "b"], "same": [1, 1.0], "gap": [1, None], "cfg": [{"k": 1}, {"k": 1}]})
    assert compare_rows.differing_columns(rows) == ["gap"]


def test_tokens_seen_counts_each_runs_response_tokens_up_to_the_step(db):
    """The x axis that compares runs of different batch sizes: the run's response tokens through the step."""
    rows = pd.DataFrame(_command_rows("--db", db, "--run", "healthy", "--run", "truncation"))
    with Store(db, read_only=True) as store:
        for run in ("healthy", "truncation"):
            lengths = store.rollout_lengths(run).merge(store.rollout_keys(run), on=["rollout_id", "group_id"])
            through = lengths.groupby("step")["length"].sum().cumsum()
            mine = rows[rows["run"] == run].set_index("step")["tokens_seen"]
            assert mine.astype(int).to_dict() == through.astype(int).to_dict()


def test_what_differs_comes_first_in_the_printed_rows(printed, compared):
    keys = list(printed[0])  # the JSON objects' keys, in the order printed
    differing = compare_rows.differing_columns(compared)
    assert keys[0] == "run" and set(keys[1 : 1 + len(differing)]) == set(differing)
    settings = [k for k in keys[1:] if k.startswith("config.")]
    assert keys[1 : 1 + len(settings)] == settings == ["config.beta", "config.model.dtype"]
    same = keys[1 + len(differing) :]
    assert "rollouts" in same and "tokens" not in same  # equal on every run: after what differs
    text = cli_compare.as_text(compared).splitlines()
    assert [line.split()[0] for line in text[1:3]] == ["config.beta", "config.model.dtype"]


def test_the_kl_runs_differ_first_in_beta(bundled_db):
    done = run_cli_here("compare-runs", "--db", bundled_db, "--run", "kl-0.0", "--run", "kl-0.2", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert list(rows[0])[:2] == ["run", "config.beta"]
    assert [r["config.beta"] for r in rows] == [0.0, 0.2]
