"""Compare in headless chromium: adding an estimator keeps what was already shown."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import after, open_view, runs, shown

pytestmark = pytest.mark.browser


def bars(page) -> dict[str, object]:
    """The credit-mass bars the page draws: estimator -> its credit shares per class (as sent)."""
    shown(page, "compare_mass", "data.0.name")  # y is sent as bytes, drawn as numbers
    return {t["name"]: t["y"] for t in runs(page).figure("compare_mass")["data"] if t["type"] == "bar"}


def agreement(page) -> dict[tuple[str, str], str]:
    shown(page, "compare_agreement", "data.0.x")
    trace = runs(page).figure("compare_agreement")["data"][0]
    return {(a, b): trace["text"][i][j] for i, a in enumerate(trace["y"]) for j, b in enumerate(trace["x"])}


def test_adding_a_third_estimator_keeps_the_first_two(page):
    open_view(page, "compare?run=demo&rollout=3&ests=grpo,entropy&tab=agreement")  # agreement and mass
    before_bars, before_rho = bars(page), agreement(page)
    assert list(before_bars) == ["grpo", "entropy"]
    box = page.locator(".st-key-compare_estimators input")
    box.click()
    box.fill("recency")
    after(page, lambda: page.get_by_role("option", name=re.compile("^recency")).click())
    after_bars, after_rho = bars(page), agreement(page)
    assert list(after_bars) == ["grpo", "entropy", "recency"]
    assert {k: after_bars[k] for k in before_bars} == before_bars
    assert after_rho[("grpo", "entropy")] == before_rho[("grpo", "entropy")]
    assert ("recency", "grpo") in after_rho
    assert "ests=grpo%2Centropy%2Crecency" in page.url or "ests=grpo,entropy,recency" in page.url
