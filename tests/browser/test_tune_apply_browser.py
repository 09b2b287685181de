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
    pairs = re.findall(r"([\w ]+?) (-?\d+\.\d+)(?:,|$)", label.split(": ", 1)[1])
    return {c.strip(): float(v) for c, v in pairs}


def test_apply_sets_the_sliders_the_url_and_the_heatmap_clamped(page):
    # a large η drives some replayed β above the sliders' maximum of 3
    open_view(page, "tune?run=demo&rollout=0&eta=10.0")
    page.wait_for_selector(".st-key-tune_apply_replayed button")
    page.wait_for_selector(".st-key-tune_heatmap .js-plotly-plot")
    offer = offered(page)
    assert any(b > 3 for b in offer.values()), offer  # the case that must be clamped
    before = page.evaluate(HEATMAP_Z, "tune_heatmap")
    # the fragment's callback, then the whole page's rerun: `after` waits for the last of them
    after(page, lambda: page.locator(".st-key-tune_apply_replayed button").click())
    wait_heatmap_change(page, "tune_heatmap", before)
    for channel, beta in offer.items():
        want = min(max(beta, 0.0), 3.0)
        assert slider_value(page, f"β {channel}") == pytest.approx(want, abs=0.006), channel
        shown_beta = page.evaluate("(c) => new URL(location.href).searchParams.get('beta_' + c)", channel)
        assert float(shown_beta) == pytest.approx(want, abs=0.006), channel
    assert "clamped" in page.get_by_text("was clamped").first.inner_text()
    # the replay now starts from what the sliders show, and says so
    start = page.get_by_text("Starts from β").first.inner_text()
    for channel, beta in offer.items():
        assert f"{channel} {min(max(beta, 0.0), 3.0):g}"[: len(channel) + 3] in start
