"""Compare in headless chromium: adding an estimator keeps what was already shown."""

from __future__ import annotations

import re

import pytest

from tests.browser.conftest import after, open_view, runs, shown

pytestmark = pytest.mark.browser


def bars(page) -> dict[str, object]:
    """The credit-mass bars the page draws: estimator (its credit) and `estimator · penalty` -> their shares
    per class (as sent)."""
    shown(page, "compare_mass", "data.0.name")  # x is sent as bytes, drawn as numbers
    return {t["name"]: t["x"] for t in runs(page).figure("compare_mass")["data"] if t["type"] == "bar"}


def agreement(page) -> dict[tuple[str, str], str]:
    shown(page, "compare_agreement", "data.0.x")
    trace = runs(page).figure("compare_agreement")["data"][0]
    return {(a, b): trace["text"][i][j] for i, a in enumerate(trace["y"]) for j, b in enumerate(trace["x"])}


def test_adding_a_third_estimator_keeps_the_first_two(page):
    open_view(page, "compare?run=demo&rollout=3&ests=grpo,entropy&tab=agreement")  # agreement and mass
    before_bars, before_rho = bars(page), agreement(page)
    assert list(before_bars) == ["grpo", "grpo · penalty", "entropy", "entropy · penalty"]
    box = page.locator(".st-key-compare_estimators input")
    box.click()
    box.fill("recency")
    after(page, lambda: page.get_by_role("option", name=re.compile("^recency")).click())
    after_bars, after_rho = bars(page), agreement(page)
    assert [n for n in after_bars if "penalty" not in n] == ["grpo", "entropy", "recency"]
    assert {k: after_bars[k] for k in before_bars} == before_bars
    assert after_rho[("grpo", "entropy")] == before_rho[("grpo", "entropy")]
    assert ("recency", "grpo") in after_rho
    assert "ests=grpo%2Centropy%2Crecency" in page.url or "ests=grpo,entropy,recency" in page.url


SIX = "grpo,entropy,prefix_tree,gtpo,rloo,ktae"
# Where the drawn legend sits against the plot area of figure `key`: [legend top, plot bottom] in pixels.
LEGEND_AND_PLOT = """(key) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  return [gd.querySelector('.legend').getBoundingClientRect().top,
          gd.querySelector('.nsewdrag').getBoundingClientRect().bottom];
}"""


def test_compare_on_demo_357_shows_one_signed_credit_with_readable_numbers(page):
    """Six estimators on the demo's rollout 357: every chart reads the final A, the filler's share is all
    penalty (the format and style penalties), each bar carries its number and the legend is under the plot."""
    open_view(page, f"compare?run=demo&rollout=357&ests={SIX}&tab=agreement")
    shown(page, "compare_mass", "data.0.name")
    bars = [t for t in runs(page).figure("compare_mass")["data"] if t["type"] == "bar"]
    assert [t["name"] for t in bars if "penalty" not in t["name"]] == SIX.split(",")
    filler = next(i for i, label in enumerate(bars[0]["y"]) if label.startswith("filler"))
    credit, penalty = bars[0], bars[1]  # grpo's
    assert credit["text"][filler] == "" and penalty["text"][filler].startswith("−")  # no credit, a penalty
    assert all(any(text for text in t["text"]) for t in bars)  # every estimator's bars are labelled
    legend_top, plot_bottom = page.evaluate(LEGEND_AND_PLOT, "compare_mass")
    assert legend_top >= plot_bottom  # under the plot: it covers no bar
    assert page.get_by_text("final A (every channel)").count() >= 1  # the one credit picked, by default
