"""Tune's "Apply the replayed β" in a real browser: the replay is a fragment, so only a browser shows
whether the applied β reaches the sliders (drawn by another fragment, in the other tab), the URL and the
heatmap."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import HEATMAP_Z, after, open_tab, open_view, wait_heatmap_change

pytestmark = pytest.mark.browser


def slider_value(page, label: str) -> float:
    return float(page.locator(f'input[type=range][aria-label="{label}"]').input_value())


def offered(page) -> dict[str, float]:
    """The β the Apply button offers, channel -> value (from its label)."""
    label = page.locator(".st-key-tune_apply_replayed button").inner_text()
    pairs = re.findall(r"([\w ]+?) (-?\d+(?:\.\d+)?)(?:,|$)", label.split(": ", 1)[1])
    return {c.strip(): float(v) for c, v in pairs}


def test_apply_sets_the_sliders_the_url_and_the_heatmap_unclamped(page):
    """Issue 43: the sliders reach any β the replay produces (they stopped at 3 and clamped before), and the
    applied β is the session's tuned β, in the URL as `tuned=channel:β,...` with 4 significant digits."""
    # a large η drives some replayed β above 3, where the sliders used to stop; a link to the replay's tab
    open_view(page, "tune?run=demo&rollout=0&eta=10.0&tab=replay")
    page.wait_for_selector(".st-key-tune_apply_replayed button")
    assert "tab=replay" in page.url
    assert page.locator(".st-key-tune_heatmap").count() == 0  # the β tab is drawn only once opened
    open_tab(page, "β per channel")
    page.wait_for_selector(".st-key-tune_heatmap .js-plotly-plot")
    assert "tab=" not in page.url  # the first tab: the link leaves it out
    before = page.evaluate(HEATMAP_Z, "tune_heatmap")
    open_tab(page, "Dual ascent replay · effect on the run")
    page.wait_for_selector(".st-key-tune_apply_replayed button")
    assert "tab=replay" in page.url
    offer = offered(page)
    assert any(b > 3 for b in offer.values()), offer
    # the fragment's callback, then the whole page's rerun on the β tab: `after` waits for the last of them
    after(page, lambda: page.locator(".st-key-tune_apply_replayed button").click())
    wait_heatmap_change(page, "tune_heatmap", before)
    assert "tab=" not in page.url
    tuned = page.evaluate("() => new URL(location.href).searchParams.get('tuned')")
    in_url = {c: float(b) for c, b in (pair.split(":") for pair in tuned.split(","))}
    for channel, beta in offer.items():
        assert slider_value(page, f"β {channel}") == pytest.approx(beta, abs=0.026), channel  # its step: 0.05
        assert in_url[channel] == pytest.approx(beta, rel=1e-3), channel
        assert len(str(in_url[channel]).replace(".", "").lstrip("0")) <= 5, tuned  # no 16-digit floats
    assert page.get_by_text("was clamped").count() == 0
    assert "tuned β" in page.locator("[data-testid=stMain]").inner_text()
