"""Tune's "Apply the replayed β" in a real browser: the replay is a fragment, so only a browser shows
whether the applied β reaches the sliders (drawn by another fragment), the URL and the heatmap."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import HEATMAP_Z, after, open_view, wait_heatmap_change

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
    # a large η drives some replayed β above 3, where the sliders used to stop
    open_view(page, "tune?run=demo&rollout=0&eta=10.0")
    page.wait_for_selector(".st-key-tune_apply_replayed button")
    page.wait_for_selector(".st-key-tune_heatmap .js-plotly-plot")
    offer = offered(page)
    assert any(b > 3 for b in offer.values()), offer
    before = page.evaluate(HEATMAP_Z, "tune_heatmap")
    # the fragment's callback, then the whole page's rerun: `after` waits for the last of them
    after(page, lambda: page.locator(".st-key-tune_apply_replayed button").click())
    wait_heatmap_change(page, "tune_heatmap", before)
    tuned = page.evaluate("() => new URL(location.href).searchParams.get('tuned')")
    in_url = {c: float(b) for c, b in (pair.split(":") for pair in tuned.split(","))}
    for channel, beta in offer.items():
        assert slider_value(page, f"β {channel}") == pytest.approx(beta, abs=0.026), channel  # its step: 0.05
        assert in_url[channel] == pytest.approx(beta, rel=1e-3), channel
        assert len(str(in_url[channel]).replace(".", "").lstrip("0")) <= 5, tuned  # no 16-digit floats
    assert page.get_by_text("was clamped").count() == 0
    assert "tuned β" in page.locator("[data-testid=stMain]").inner_text()
