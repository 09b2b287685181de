"""Every view shows what the command line prints: the Rollout view's task row and the Compare view's
panels equal `creditlens estimate` on that rollout, for estimators of every scope (AppTest, real store)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow.parquet as pq
import pytest

from app.view_data import compare as compare_data
from backend.credit import token_classes
from backend.store import Store
from tests.app.conftest import COMPARE_OPEN, chart, decode, open_app, text_blocks
from tests.conftest import run_cli_here

ROLLOUT = 352


def heatmap_row(spec: dict, name: str) -> np.ndarray:
    """The values of row `name` of a credit heatmap (one heatmap trace per band), in token order."""
    axis = spec["layout"]["yaxis"]
    label = {int(v): t.split("  [")[0] for v, t in zip(axis["tickvals"], axis["ticktext"], strict=True)}
    parts = []
    for trace in spec["data"]:
        if trace["type"] != "heatmap":
            continue
        z = np.asarray(decode(trace["z"]), dtype=np.float64)
        edges = np.asarray(decode(trace["y"]), dtype=np.float64)
        parts += [z[r] for r in range(z.shape[0]) if label.get(int(round(edges[r] + 0.5))) == name]
    values = np.concatenate(parts)
    return values[np.isfinite(values)]


def cli_advantages(db, name: str, out) -> np.ndarray:
    done = run_cli_here("estimate", "--db", str(db), "--run", "demo", "--estimator", name, "--out", str(out))
    assert done.returncode == 0
    frame = pq.read_table(out).to_pandas()
    return frame[frame["rollout_id"] == ROLLOUT].sort_values("pos")["advantage"].to_numpy()


@pytest.mark.parametrize("name", ["token_rm", "rudder", "ktae", "gae", "gtpo", "stare", "aggregation"])
def test_rollout_view_task_row_equals_estimate(app_db, tmp_path, name):
    at = open_app(app_db, "rollout", {"run": "demo", "rollout": str(ROLLOUT), "est": name})
    assert not at.exception, at.exception
    shown = heatmap_row(chart(at, "rollout_heatmap"), "task")
    expected = cli_advantages(app_db, name, tmp_path / "a.parquet")
    np.testing.assert_allclose(shown, expected, atol=1e-5)
    derivation = text_blocks(at)
    assert any("A_t" in text for text in derivation)  # Why this credit shows the estimator's derivation


def test_compare_view_panels_equal_estimate(app_db, tmp_path):
    query = {"run": "demo", "rollout": str(ROLLOUT), "ests": "token_rm,grpo", "credit": "channel:task"}
    at = open_app(app_db, page="compare", query=query)
    assert not at.exception, at.exception
    spec = chart(at, "compare_multiples")
    expected = cli_advantages(app_db, "token_rm", tmp_path / "t.parquet")
    np.testing.assert_allclose(heatmap_row(spec, "token_rm"), expected, atol=1e-5)  # one row per estimator


def test_unavailable_estimators_are_listed_with_reason_and_fix_not_offered(app_db):
    # The oracle run has no resampled values (the demo run ships its Monte Carlo teacher).
    at = open_app(app_db, "rollout", {"run": "oracle", "rollout": "0"})
    assert "suffix_mc" not in at.selectbox(key="rollout_estimator").options
    notes = [m.value for m in at.markdown]
    lines = [line for n in notes for line in n.splitlines()]  # one list, a line per estimator
    assert any(line.startswith("- **suffix\\_mc**") and "creditlens resample" in line for line in lines)
    at = open_app(app_db, page="compare", query={"run": "oracle", "rollout": "0"})
    assert "suffix_mc" not in at.multiselect(key="compare_estimators").options


def test_compare_keeps_drawing_when_one_estimator_fails(app_db):
    """An estimator that fails on this run (no resampling results) gets its error; the rest are computed."""
    with Store(app_db, read_only=True) as store:
        group = int(store.rollout_index("oracle").set_index("rollout_id").loc[0, "group_id"])
    result = compare_data.compare(str(app_db), "oracle", group, 0, (("token_rm", ()), ("suffix_mc", ())))
    assert list(result["rollout"]) == ["token_rm"]
    assert "resampl" in result["errors"]["suffix_mc"]


def test_compare_credit_by_class_uses_the_runs_own_classes(app_db):
    with Store(app_db) as store:
        token_classes.save(store, "demo", (token_classes.TokenClass("answer digits", "regex", r"^\d$"),))
    query = {"run": "demo", "rollout": str(ROLLOUT), "tab": "agreement"}  # the class shares' tab
    at = open_app(app_db, page="compare", query=query, opened=COMPARE_OPEN)
    assert not at.exception, at.exception
    mass = at.dataframe[0].value
    assert set(mass.index) == {"answer digits", "other"}


def test_compare_on_all_channels_equals_estimate_channel_all(app_db, tmp_path):
    # a link of before, `?channel=all`, opens the what-if on the scores summed first
    query = {"run": "demo", "rollout": str(ROLLOUT), "ests": "grpo,entropy", "channel": "all"}
    at = open_app(app_db, page="compare", query=query)
    assert not at.exception, at.exception
    out = tmp_path / "all.parquet"
    assert (
        run_cli_here(
            "estimate",
            "--db",
            str(app_db),
            "--run",
            "demo",
            "--estimator",
            "grpo",
            "--channel",
            "all",
            "--out",
            str(out),
        ).returncode
        == 0
    )
    frame = pq.read_table(out).to_pandas()
    expected = frame[frame["rollout_id"] == ROLLOUT].sort_values("pos")["advantage"].to_numpy()
    np.testing.assert_allclose(heatmap_row(chart(at, "compare_multiples"), "grpo"), expected, atol=1e-5)
    task = cli_advantages(app_db, "grpo", tmp_path / "task.parquet")
    assert not np.allclose(expected, task)  # the summed channels are another outcome than task alone


def test_tune_summed_reward_baseline_equals_estimate_and_explain(app_db, tmp_path):
    """Tune against the summed reward: side by side it is `estimate --channel all`; as a difference it is
    `explain --beta ... --json`'s final minus that."""
    query = {
        "run": "demo",
        "rollout": str(ROLLOUT),
        "est": "entropy",
        "beta_style": "2.0",
        "base": "side by side",
        "against": "summed",
    }
    at = open_app(app_db, page="tune", query=query)
    assert not at.exception, at.exception
    out = tmp_path / "all.parquet"
    assert (
        run_cli_here(
            "estimate",
            "--db",
            str(app_db),
            "--run",
            "demo",
            "--estimator",
            "entropy",
            "--channel",
            "all",
            "--out",
            str(out),
        ).returncode
        == 0
    )
    frame = pq.read_table(out).to_pandas()
    summed = frame[frame["rollout_id"] == ROLLOUT].sort_values("pos")["advantage"].to_numpy()
    np.testing.assert_allclose(
        heatmap_row(chart(at, "tune_baseline_heatmap"), "summed reward"), summed, atol=1e-5
    )
    assert any("--channel all" in c.value for c in at.caption)

    at.radio(key="tune_baseline").set_value("difference").run()
    assert not at.exception, at.exception
    done = run_cli_here(
        "explain",
        "--db",
        str(app_db),
        "--run",
        "demo",
        "--rollout",
        str(ROLLOUT),
        "--estimator",
        "entropy",
        "--channel",
        "all",
        "--json",
    )
    assert done.returncode == 0
    explained = json.loads(done.stdout)
    np.testing.assert_allclose(explained["terms"]["tokens"]["advantage"], summed, atol=1e-5)  # same baseline
    # the tuned split: the estimator on the run's main channel (task), the other channels at their β
    done = run_cli_here(
        "explain",
        "--db",
        str(app_db),
        "--run",
        "demo",
        "--rollout",
        str(ROLLOUT),
        "--estimator",
        "entropy",
        "--beta",
        "style=2",
        "--json",
    )
    assert done.returncode == 0
    tuned = np.asarray(json.loads(done.stdout)["final"], dtype=np.float64)
    shown = heatmap_row(chart(at, "tune_baseline_heatmap"), "final: tuned − summed")
    np.testing.assert_allclose(shown, tuned - summed, atol=1e-5)
    assert np.abs(tuned - summed).max() > 1e-3  # β on the split channels is not the summed reward
