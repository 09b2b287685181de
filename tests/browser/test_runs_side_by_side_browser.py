"""Runs side by side (issue 45) in a real browser: Trends at `?runs=a,b,c` draws a trace per run on each
chart (smoothed line named by the run, raw points faint), and the Runs comparison view shows
`compare-runs`'s rows. Screenshots of both go to tests/browser/screenshots/ (or $SHOTS45)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.browser.conftest import SCREENSHOTS, open_view, settle

pytestmark = pytest.mark.browser
RUNS = ("demo", "agent", "small")
TRACES = """(key) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  return gd ? gd._fullData.map(t => [t.name, t.showlegend !== false, t.opacity]) : null;
}"""


def test_trends_over_three_runs_and_the_comparison_table(page):
    shots = Path(os.environ.get("SHOTS45", SCREENSHOTS))
    shots.mkdir(parents=True, exist_ok=True)
    open_view(page, f"trends?run=demo&runs={','.join(RUNS)}")
    page.wait_for_selector(".st-key-trends_runs_length .js-plotly-plot", timeout=180_000)
    settle(page, timeout=180)
    traces = page.evaluate(TRACES, "trends_runs_length")
    named = [name for name, legend, _ in traces if legend]
    assert named == list(RUNS), traces  # one smoothed line per run, in the order picked
    faint = [opacity for name, legend, opacity in traces if not legend and not name.endswith(" warnings")]
    assert len(faint) == 3 and all(o < 0.5 for o in faint)  # the raw points, drawn faint
    assert "runs=demo%2Cagent%2Csmall" in page.url or "runs=demo,agent,small" in page.url
    page.screenshot(path=str(shots / "trends_three_runs.png"), full_page=True)

    open_view(page, f"runs-compare?run=demo&runs={','.join(RUNS)}")
    page.wait_for_selector("[data-testid=stDataFrame]", timeout=180_000)
    settle(page, timeout=180)
    main = page.locator("[data-testid=stMain]").inner_text()
    assert "creditlens compare-runs --run demo --run agent --run small" in main
    page.screenshot(path=str(shots / "runs_comparison.png"), full_page=True)
