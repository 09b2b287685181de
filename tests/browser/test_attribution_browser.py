"""The Rollout view's "Whose credit moved this token" in headless chromium: asked for, it draws the group's
responses with each token's share; a click on another token takes the old token's answer away until it is
asked for again."""

from __future__ import annotations

import pytest

from tests.browser.conftest import after, open_tab, open_view, shown, token_point

pytestmark = pytest.mark.browser
HEATMAP = "rollout_attribution_heatmap"


def test_the_attribution_is_drawn_on_demand_and_only_for_its_token(page):
    open_view(page, "rollout?run=kl-0.2&rollout=0&pos=0")
    open_tab(page, "Whose credit moved this token")
    assert page.locator(f".st-key-{HEATMAP}").count() == 0
    after(page, lambda: page.get_by_role("button", name="Whose credit moved this token").click(), timeout=180)
    page.wait_for_selector(f".st-key-{HEATMAP} .js-plotly-plot", timeout=180_000)
    labels = shown(page, HEATMAP, "layout.yaxis.ticktext")
    assert sum("Ā=" in label for label in labels) == 4  # the four responses of the group
    assert any(label.startswith("#0 ") and "(selected)" in label for label in labels)
    assert any(
        "Predicted Δ log π of token 0" in t
        for t in page.locator("[data-testid=stMarkdown]").all_inner_texts()
    )
    x, y = token_point(page, "rollout_heatmap", 5)
    after(page, lambda: page.mouse.click(x, y))
    assert "pos=5" in page.url
    assert page.locator(f".st-key-{HEATMAP}").count() == 0  # token 0's answer is not shown for token 5
    assert page.get_by_role("button", name="Whose credit moved this token").count() == 1
