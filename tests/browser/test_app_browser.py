"""The app in headless chromium against a real server: every view, clicks, sliders, resample, upload."""

from __future__ import annotations

import json

import pytest

from tests.browser.conftest import (
    HEATMAP_Z,
    after,
    open_view,
    set_by_keys,
    settle,
    token_point,
    wait_heatmap_change,
)
from tests.conftest import make_records

pytestmark = pytest.mark.browser


@pytest.mark.parametrize(
    "path, heading",
    [
        ("", "Explorer · demo"),
        ("explorer", "Explorer · demo"),  # the landing view at its own path too (not "Page not found")
        ("rollout", "Rollout #0"),
        ("trends", "Trends · demo"),
        ("group", "Group 0"),
        ("compare", "Compare estimators"),
        ("tune", "Tune channel weights"),
        ("resample", "Resample suffixes"),
        ("oracle?run=oracle", "Credit quality"),
        ("runs", "Runs"),
    ],
)
def test_each_view_opens(page, path, heading):
    open_view(page, path)
    assert heading in page.locator("h1").first.inner_text()
    assert page.locator("[data-testid=stAppDeployButton]").count() == 0  # client.toolbarMode = viewer
    assert page.get_by_role("button", name="Deploy").count() == 0
    assert page.get_by_text("Page not found").count() == 0
    if path not in ("runs", "", "explorer"):  # the Explorer is a table
        page.wait_for_selector(".js-plotly-plot .main-svg")


def test_bookmark_opens_that_rollout(page):
    open_view(page, "rollout?run=oracle&rollout=7")
    assert "Rollout #7" in page.locator("h1").first.inner_text()
    page.wait_for_selector(".st-key-rollout_heatmap .ytick", state="attached")
    assert "true credit" in page.locator(".st-key-rollout_heatmap").text_content()
    assert "run=oracle" in page.url and "rollout=7" in page.url


def click_cell(page, key: str, col: int, row: int) -> None:
    """Click token `col` in row `row` of its band of heatmap `key`."""
    page.mouse.click(*token_point(page, key, col, row))


def test_click_a_token_shows_why_this_credit(page):
    open_view(page, "rollout?run=oracle&rollout=0")
    page.wait_for_selector(".st-key-rollout_heatmap .nsewdrag")
    assert "token 0" in page.locator("h3").filter(has_text="Why this credit").inner_text()
    after(page, lambda: click_cell(page, "rollout_heatmap", col=10, row=2))  # style, task, final, true credit
    assert "token 10" in page.locator("h3").filter(has_text="Why this credit").inner_text()
    assert "pos=10" in page.url
    # after the rerun the clicked token is outlined (a shape over column 10 of the first band)
    shapes = page.evaluate(
        "() => document.querySelector('.st-key-rollout_heatmap .js-plotly-plot').layout.shapes"
    )
    assert [s["name"] for s in shapes] == ["selected 10"]
    assert page.locator(".st-key-rollout_heatmap .shapelayer path").count() >= 1


def test_beta_slider_redraws_the_heatmap(page):
    open_view(page, "tune?run=oracle&rollout=0")
    page.wait_for_selector(".st-key-tune_heatmap .js-plotly-plot")
    before = page.evaluate(HEATMAP_Z, "tune_heatmap")
    # the β panel is a fragment: each key press is its own short rerun, the last one sets the URL
    assert set_by_keys(page, "tune_beta_style", 4) == 1.2
    wait_heatmap_change(page, "tune_heatmap", before)
    assert "beta_style=1.2" in page.url


def test_small_resample_shows_its_result(page):
    open_view(page, "resample?run=demo&rollout=1")
    m = page.locator(".st-key-resample_m input")
    m.fill("2")
    after(page, lambda: m.press("Enter"))
    after(page, lambda: page.locator(".st-key-resample_run button").click(), timeout=90)
    page.wait_for_selector("text=stored", timeout=90_000)
    settle(page, timeout=90)
    assert page.locator(".st-key-resample_values .js-plotly-plot").count() == 1


def test_upload_a_file_imports_a_run(page, tmp_path):
    path = tmp_path / "uploaded.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in make_records(n_groups=1, group_size=3, seed=4)) + "\n")
    open_view(page, "runs")
    name = page.locator(".st-key-runs_import_name input")
    name.fill("uploaded-run")
    after(page, lambda: name.press("Enter"))
    upload = page.locator(".st-key-runs_import_upload input[type=file]")
    after(page, lambda: upload.set_input_files(str(path)))
    page.wait_for_selector("text=uploaded.jsonl")
    after(page, lambda: page.locator(".st-key-runs_import_button button").click(), timeout=90)
    page.wait_for_selector("text=imported 3 rollouts")
    assert (
        "uploaded-run" in page.locator("[data-testid=stDataFrame]").first.inner_text()
        or page.locator("text=uploaded-run").count() > 0
    )
