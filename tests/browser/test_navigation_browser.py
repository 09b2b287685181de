"""Moving between views in a real browser: Back returns to the previous view in one press, a mistyped view
path and the link parameters the view shown drops are named on the page, the Runs comparison puts what
differs on top, and the Explorer shows the column it is sorted by beside the rollout's id. Screenshots go to
tests/browser/screenshots/ (or $SHOTS_DIR)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.browser.conftest import SCREENSHOTS, after, open_view, settle

pytestmark = pytest.mark.browser
TABLE = "[data-testid=stDataFrame]"


def shots() -> Path:
    folder = Path(os.environ.get("SHOTS_DIR", SCREENSHOTS))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def heading(page) -> str:
    return page.locator("h1").first.inner_text()


def warnings(page) -> str:
    return "\n".join(a.inner_text() for a in page.locator("[data-testid=stAlert]").all())


def test_back_after_opening_a_rollout_returns_to_the_explorer(page):
    open_view(page, "explorer?run=demo&sort=length")
    box = page.locator(TABLE).bounding_box()  # the row-selection column of the first data row
    after(page, lambda: page.mouse.click(box["x"] + 16, box["y"] + 35 + 17))
    assert "Rollout #" in heading(page) and "/rollout" in page.url
    after(page, page.go_back)  # one press
    assert "Explorer · demo" in heading(page)
    assert "/explorer?" in page.url and "sort=length" in page.url  # the view's entry, its choices kept
    page.wait_for_selector(f"{TABLE} [role=row][aria-rowindex='2']", state="attached")
    page.screenshot(path=str(shots() / "back_after_explorer_to_rollout.png"), full_page=True)
    after(page, page.go_forward)
    assert "Rollout #" in heading(page)


def test_a_mistyped_view_path_and_the_parameter_it_drops_are_named(page):
    open_view(page, "rollot?run=demo&runs=kl-0.0,kl-0.2")
    said = warnings(page)
    assert "There is no view at /rollot" in said and "/rollout (Rollout)" in said
    assert "runs=kl-0.0,kl-0.2" in said and "not used by the Explorer view" in said


def test_the_runs_comparison_puts_what_differs_on_top(page):
    open_view(page, "runs-compare?run=kl-0.0&runs=kl-0.0,kl-0.2")
    page.wait_for_selector(f"{TABLE} [role=row][aria-rowindex='2']", state="attached", timeout=180_000)
    settle(page, timeout=180)
    first = page.locator(f"{TABLE} [role=row][aria-rowindex='2']").first
    cells = [c.text_content() for c in first.locator("[role=gridcell], [role=rowheader]").all()]
    assert cells[:3] == ["config.beta", "0", "0.2"], cells  # the one setting the runs differ in, on top
    shares = page.locator(f"{TABLE} [role=gridcell]").filter(has_text="%")
    assert shares.count() > 0  # shares as the Explorer shows them
    folded = page.locator("[data-testid=stExpander]").filter(has_text="The same on every run")
    assert folded.count() == 1 and folded.locator(TABLE).count() == 0  # the rest, folded
    page.screenshot(path=str(shots() / "runs_comparison_kl.png"), full_page=True)


def test_the_explorer_shows_the_sorted_column_beside_the_rollout_id(page):
    open_view(page, "explorer?run=demo&sort=excess_filler&desc=True")
    page.wait_for_selector(f"{TABLE} [role=row][aria-rowindex='2']", state="attached")
    header = page.locator(f"{TABLE} [role=row][aria-rowindex='1'] [role=columnheader]")
    names = [h.text_content() for h in header.all()]
    assert names[:2] == ["rollout_id", "excess_filler"], names
    assert len(names) == len(set(names)), names  # moved, not repeated
    page.screenshot(path=str(shots() / "explorer_sorted_by_excess_filler.png"), full_page=True)


def test_a_view_that_stops_early_still_writes_its_address(page):
    # Trends over several runs draws its charts and stops (state.stop): after a bare st.stop nothing more
    # reaches the browser, the URL's rewrite included
    open_view(page, "trends?run=demo&runs=kl-0.0,kl-0.2&sort=length")
    assert "smooth=0.6" in page.url and "x=step" in page.url and "sort=length" not in page.url
    assert "sort=length not used by the Trends view" in warnings(page)
