"""Every view shows what the command line prints: the Rollout view's task row and the Compare view's
panels equal `creditlens estimate` on that rollout, for estimators of every scope (AppTest, real store)."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from backend.cli import main
from tests.app.conftest import chart, decode, open_app

ROLLOUT = 352


def heatmap_row(spec: dict, name: str) -> np.ndarray:
    """The values of row `name` of a credit heatmap, bands unwrapped in token order."""
    z = np.asarray(decode(spec["data"][0]["z"]), dtype=np.float64)
    axis = spec["layout"]["yaxis"]
    ticks = zip(axis["tickvals"], axis["ticktext"], strict=True)
    ys = [int(y) for y, t in ticks if t.split("  [")[0] == name]
    values = np.concatenate([z[y] for y in ys])
    return values[np.isfinite(values)]


def cli_advantages(db, name: str, out) -> np.ndarray:
    assert main(["estimate", "--db", str(db), "--run", "demo", "--estimator", name, "--out", str(out)]) == 0
    frame = pq.read_table(out).to_pandas()
    return frame[frame["rollout_id"] == ROLLOUT].sort_values("pos")["advantage"].to_numpy()


@pytest.mark.parametrize("name", ["token_rm", "rudder", "ktae", "gae", "gtpo", "stare", "aggregation"])
def test_rollout_view_task_row_equals_estimate(app_db, tmp_path, name):
    at = open_app(app_db, query={"run": "demo", "rollout": str(ROLLOUT), "est": name})
    assert not at.exception, at.exception
    shown = heatmap_row(chart(at, "rollout_heatmap"), "task")
    expected = cli_advantages(app_db, name, tmp_path / "a.parquet")
    np.testing.assert_allclose(shown, expected, atol=1e-5)
    derivation = [c.value for c in at.code]
    assert any("A_t" in text for text in derivation)  # Why this credit shows the estimator's derivation


def test_compare_view_panels_equal_estimate_and_a_failing_estimator_keeps_its_panel(app_db, tmp_path):
    at = open_app(app_db, page="compare", query={"run": "demo", "rollout": str(ROLLOUT),
                                                   "ests": "token_rm,grpo,suffix_mc"})
    assert not at.exception, at.exception
    assert any(e.value.startswith("suffix\\_mc cannot run") and "resampling" in e.value for e in at.error)
    spec = chart(at, "compare_multiples")
    expected = cli_advantages(app_db, "token_rm", tmp_path / "t.parquet")
    z = np.asarray(decode(spec["data"][0]["z"]), dtype=np.float64).ravel()
    np.testing.assert_allclose(z[np.isfinite(z)], expected, atol=1e-5)
