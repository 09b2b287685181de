"""The Explorer in headless Chromium: search, sort, filter, then a click on a row opens that rollout.

The table is Streamlit's canvas data grid; its accessible mirror (`[role=row]` / `[role=gridcell]`) holds
the visible cells, which is what these tests read. The expected rows come from `backend.explorer` on the
server's store (read-only, after the page has filled the summaries).
"""

from __future__ import annotations

import time

from app.testing import wait_idle
from backend.explorer import ExplorerQuery, Filter, rollout_table
from backend.store import StoreHandle
from tests.browser.conftest import PAYLOADS, open_view

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


def choose(page, key: str, option: str) -> None:
    page.locator(f".st-key-{key} button[aria-label=Open]").click()  # a react-aria combobox
    page.get_by_role("option", name=option, exact=True).click()
    wait_idle(page)


def test_search_sort_filter_then_click_opens_the_rollout(page, server):
    open_view(page, "?run=demo")
    assert "Explorer · demo" in page.locator("h1").first.inner_text()
    assert caption_count(page) == 448
    assert [r[0] for r in grid_rows(page, 3)] == ["0", "1", "2"]

    search = page.locator(".st-key-explorer_search input")
    search.fill("Obviously")
    search.press("Enter")
    wait_idle(page)
    choose(page, "explorer_sort", "length")
    for _ in range(3):  # on a loaded machine a click that lands during the sort's rerun can be dropped
        if page.locator(".st-key-explorer_desc input").is_checked():
            break
        page.locator(".st-key-explorer_desc label").click()
        wait_idle(page)
    page.wait_for_function("() => location.href.includes('desc=True')")
    page.get_by_text("Filters: flags and ranges").click()
    page.locator(".st-key-explorer_flag_zero_variance").get_by_text("no", exact=True).click()
    wait_idle(page)
    assert "sort=length" in page.url and "desc=True" in page.url and "q=Obviously" in page.url

    want = rollout_table(StoreHandle(server.db), "demo", ExplorerQuery(
        estimator="grpo", sort="length", descending=True, search="Obviously",
        filters=(Filter("zero_variance", "=", False),), limit=50), prepare_missing=False)
    assert 0 < want.total < 448
    page.wait_for_function(  # the last rerun (the flag filter) may still be on its way
        f"() => document.body.innerText.includes('{want.total} rollouts match')")
    wait_idle(page)
    assert caption_count(page) == want.total
    expected = want.rows["rollout_id"].tolist()[:5]
    for _ in range(40):  # the grid's accessible rows can trail the rerun that changed them
        rows = grid_rows(page, 5)
        if [int(r[0]) for r in rows] == expected[:len(rows)]:
            break
        time.sleep(0.5)
    assert [int(r[0]) for r in rows] == expected[:len(rows)]
    lengths = [int(r[4]) for r in rows]  # rollout_id, response, step, group_id, length
    assert lengths == sorted(lengths, reverse=True)

    box = page.locator(TABLE).bounding_box()  # the row-selection column of the second data row
    page.mouse.click(box["x"] + 16, box["y"] + 35 + 35 + 17)
    target = int(want.rows["rollout_id"].iloc[1])
    page.wait_for_function(
        f"() => [...document.querySelectorAll('h1')].some(h => h.innerText.includes('Rollout #{target}'))"
    )
    wait_idle(page)
    assert f"rollout={target}" in page.url and "/rollout" in page.url
    page.wait_for_selector(".st-key-rollout_heatmap .js-plotly-plot")


def test_explorer_keeps_model_text_inert_and_searchable(page):
    open_view(page, "?run=hostile")
    page.wait_for_selector(f"{TABLE} [role=row][aria-rowindex='2']", state="attached")
    search = page.locator(".st-key-explorer_search input")
    search.fill(PAYLOADS[0])  # the <script> payload, searched as plain text
    search.press("Enter")
    wait_idle(page)
    assert caption_count(page) == 3
    assert page.evaluate("() => window.__xss === undefined")
    assert page.locator(f"{TABLE} script, {TABLE} img[src=x]").count() == 0


def test_trends_charts_have_the_toolbar(page):
    open_view(page, "trends?run=demo")
    # eight charts: under load the browser takes a while to draw them all
    page.wait_for_selector(".js-plotly-plot .modebar", state="attached", timeout=120_000)
    wait_idle(page)
    plots = page.locator(".js-plotly-plot").count()
    assert plots >= 6
    assert page.locator(".js-plotly-plot .modebar").count() == plots  # each chart can be saved
    assert page.get_by_text("credit share by token class").count() == 1
