"""The Explorer and the colours in a real browser: a click on any cell of the Explorer opens that
rollout, the response text is on screen, and per-row colour bars are drawn, each labelled."""

from __future__ import annotations

import pytest

from tests.browser.conftest import after, open_view

pytestmark = pytest.mark.browser

TABLE = "[data-testid=stDataFrame]"


def test_a_click_on_a_cell_opens_its_rollout_and_the_response_is_on_screen(page):
    open_view(page, "?run=demo")
    page.wait_for_selector(f"{TABLE} [role=row][aria-rowindex='3']", state="attached")
    header = page.locator(f"{TABLE} [role=columnheader]").filter(has_text="response (start)")
    header.wait_for(state="attached")
    # the grid is a canvas: its accessible mirror gives the column's place (the row checkbox is column 1)
    assert int(header.get_attribute("aria-colindex")) <= 3  # right after rollout_id, on screen
    box = page.locator(TABLE).bounding_box()
    second = page.locator(f"{TABLE} [role=row][aria-rowindex='3'] [role=gridcell]").nth(0).text_content()
    # a cell of the response column (not the row's checkbox) in the second data row
    after(page, lambda: page.mouse.click(box["x"] + 220, box["y"] + 35 + 35 + 17))
    assert f"Rollout #{second}" in page.locator("h1").first.inner_text()
    assert f"rollout={second}" in page.url and "/rollout" in page.url


def test_per_row_colour_bars_are_drawn_each_labelled(page):
    open_view(page, "rollout?run=demo&rollout=0&scale=row")
    page.wait_for_selector(".st-key-rollout_heatmap .nsewdrag", state="attached")
    labels = page.evaluate(  # the text drawn in the strip's cells, as the browser shows it
        "() => [...document.querySelectorAll('.st-key-rollout_heatmap .hm text')].map(t => t.textContent)"
    )
    for end in ("-4.71", "+4.71", "-0.540", "+0.540", "-5.25", "+5.25"):  # process, task, final
        assert end in labels, (end, labels[-30:])


BOX_AND_PLOT = """() => {
  const plot = document.querySelector('.st-key-rollout_heatmap .js-plotly-plot');
  let box = plot.closest('[data-testid=stVerticalBlock]');  // the scrolling box of the channel rows
  while (box && !['auto', 'scroll'].includes(getComputedStyle(box).overflowY)) {
    box = box.parentElement.closest('[data-testid=stVerticalBlock]');
  }
  return [box ? box.getBoundingClientRect().height : null, plot.getBoundingClientRect().height];
}"""


def test_a_short_response_leaves_no_blank_box_under_its_rows(page):
    open_view(page, "rollout?run=small&rollout=0")  # a response of a few tokens
    page.wait_for_selector(".st-key-rollout_heatmap .nsewdrag", state="attached")
    box, plot = page.evaluate(BOX_AND_PLOT)
    assert box is not None and box - plot < 40, (box, plot)
