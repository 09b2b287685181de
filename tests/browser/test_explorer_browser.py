"""The Explorer in headless Chromium: search, sort, filter, then a click on a row opens that rollout.

The table is Streamlit's canvas data grid; its accessible mirror (`[role=row]` / `[role=gridcell]`) holds
the visible cells, which is what these tests read. The expected rows come from `backend.views.explorer` on the
server's store (read-only, after the page has filled the summaries).
"""

from __future__ import annotations

import pytest

from backend.store import StoreHandle
from backend.views.explorer import ExplorerQuery, Filter, rollout_table
from tests.browser.conftest import PAYLOADS, after, open_view

TABLE = "[data-testid=stDataFrame]"


def grid_rows(page, n: int) -> list[list[str]]:
    """The first n data rows of the grid as cell texts (the header is row 1)."""
    page.wait_for_selector(f"{TABLE} [role=row][aria-rowindex='2']", state="attached")
    out = []
    for i in range(2, n + 2):
        row = page.locator(f"{TABLE} [role=row][aria-rowindex='{i}']")
        if row.count() == 0:
            break
        out.append([c.text_content() for c in row.locator("[role=gridcell]").all()])
    return out


def caption_count(page) -> int:
    captions = page.locator("[data-testid=stCaptionContainer]").filter(has_text="rollouts match")
    text = captions.first.inner_text()
    return int(text.split(" rollouts match")[0].split()[-1])


# True once the grid's first data rows hold rollout ids `want` (its accessible rows are redrawn after the
# rerun that changed them).
GRID_IDS = """([table, want]) => {
  const got = [];
  for (let i = 2; i < 2 + want.length; i++) {
    const cell = document.querySelector(`${table} [role=row][aria-rowindex='${i}'] [role=gridcell]`);
    if (!cell) break;
    got.push(Number(cell.textContent));
  }
  return got.length > 0 && got.every((id, k) => id === want[k]);
}"""


def choose(page, key: str, option: str) -> None:
    page.locator(f".st-key-{key} button[aria-label=Open]").click()  # a react-aria combobox
    after(page, lambda: page.get_by_role("option", name=option, exact=True).click())


def test_search_sort_filter_then_click_opens_the_rollout(page, server):
    open_view(page, "?run=demo")
    assert "Explorer · demo" in page.locator("h1").first.inner_text()
    assert caption_count(page) == 448
    assert [r[0] for r in grid_rows(page, 3)] == ["0", "1", "2"]

    search = page.locator(".st-key-explorer_search input")
    search.fill("Obviously")
    after(page, lambda: search.press("Enter"))
    choose(page, "explorer_sort", "length")
    after(page, lambda: page.locator(".st-key-explorer_desc label").click())
    assert page.locator(".st-key-explorer_desc input").is_checked()
    # a lazy expander: opening it reruns the page, which draws its widgets; wait for that run before a click
    after(page, lambda: page.get_by_text("Filters: flags and ranges").click())
    no_zero_variance = page.locator(".st-key-explorer_flag_zero_variance").get_by_text("no", exact=True)
    after(page, no_zero_variance.click)
    assert "sort=length" in page.url and "desc=True" in page.url and "q=Obviously" in page.url

    want = rollout_table(
        StoreHandle(server.db),
        "demo",
        ExplorerQuery(
            estimator="grpo",
            sort="length",
            descending=True,
            search="Obviously",
            filters=(Filter("zero_variance", "=", False),),
            limit=50,
        ),
        prepare_missing=False,
    )
    assert 0 < want.total < 448
    assert caption_count(page) == want.total
    expected = want.rows["rollout_id"].tolist()[:5]
    page.wait_for_function(GRID_IDS, arg=[TABLE, expected])
    rows = grid_rows(page, 5)
    assert [int(r[0]) for r in rows] == expected[: len(rows)]
    lengths = [int(r[1]) for r in rows]  # rollout_id, then the column sorted by
    assert lengths == sorted(lengths, reverse=True)

    box = page.locator(TABLE).bounding_box()  # the row-selection column of the second data row
    target = int(want.rows["rollout_id"].iloc[1])
    after(page, lambda: page.mouse.click(box["x"] + 16, box["y"] + 35 + 35 + 17))
    assert f"Rollout #{target}" in page.locator("h1").first.inner_text()
    assert f"rollout={target}" in page.url and "/rollout" in page.url
    page.wait_for_selector(".st-key-rollout_heatmap .js-plotly-plot")


def test_explorer_keeps_model_text_inert_and_searchable(page):
    open_view(page, "?run=hostile")
    page.wait_for_selector(f"{TABLE} [role=row][aria-rowindex='2']", state="attached")
    search = page.locator(".st-key-explorer_search input")
    search.fill(PAYLOADS[0])  # the <script> payload, searched as plain text
    after(page, lambda: search.press("Enter"))
    assert caption_count(page) == 3
    assert page.evaluate("() => window.__xss === undefined")
    assert page.locator(f"{TABLE} script, {TABLE} img[src=x]").count() == 0


@pytest.mark.parametrize(
    ("opened", "charts"), [("rewards", 1), ("distribution", 1), ("credit", 3), ("behaviour", 5)]
)
def test_trends_charts_have_the_toolbar(page, opened, charts):
    open_view(page, f"trends?run=demo&tab={opened}")  # each tab's charts are drawn only while it is open
    # under load the browser takes a while to draw them all
    page.wait_for_function(
        "(n) => { const plots = document.querySelectorAll('.js-plotly-plot'); return"
        " plots.length >= n && [...plots].every(p => p.querySelector('.modebar')); }",
        arg=charts,
        timeout=120_000,
    )
    plots = page.locator(".js-plotly-plot").count()
    assert page.locator(".js-plotly-plot .modebar").count() == plots  # each chart can be saved
    assert page.get_by_text("credit share by token class").count() == (opened == "credit")
    # no chart's title runs under its toolbar (a long title's end used to sit beneath the icons)
    overlaps = page.evaluate(
        """() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => {
             const t = p.querySelector('.gtitle'), m = p.querySelector('.modebar');
             if (!t || !m) return false;
             const a = t.getBoundingClientRect(), b = m.getBoundingClientRect();
             return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
           }).map(p => p.querySelector('.gtitle').textContent)"""
    )
    assert overlaps == []
