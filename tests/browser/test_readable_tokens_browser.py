"""Tokens people can read, in headless chromium: the text view of credit on a subword-tokenized run,
the colour scale locked across a β move, a shared link that restores a configured Compare view (and token
classes), links whose parameters cannot be honoured, and Tune against the summed reward."""

from __future__ import annotations

import json
from urllib.parse import parse_qs, quote, urlsplit

import numpy as np
import pyarrow.parquet as pq
import pytest

from backend.demo.subword import subword_records
from backend.estimators import registry
from tests.app.conftest import decode
from tests.browser.conftest import (
    HEATMAP_Z,
    after,
    open_tab,
    open_view,
    set_by_keys,
    shown,
    wait_heatmap_change,
)
from tests.conftest import run_cli_here

pytestmark = pytest.mark.browser

SPANS = ".st-key-rollout_text .credit-text .tok"
COLOURBAR = "layout.coloraxis.colorbar.ticktext"


def shown_choice(page, key: str) -> str:
    """What a selectbox shows (its text, or its input's value where it renders one)."""
    box = page.locator(f".st-key-{key}")
    inputs = box.locator("input")
    return (box.text_content() or "") + " " + (inputs.first.input_value() if inputs.count() else "")


def test_text_view_reads_a_subword_response_and_clicks_select_tokens(page):
    record = subword_records(groups=2, long_response=700)[1]  # rollout 1: a whole response
    open_view(page, "rollout?run=subword&rollout=1")
    page.wait_for_selector(SPANS)
    spans = page.locator(SPANS)
    assert spans.count() == len(record["tokens"])
    texts = spans.all_text_contents()
    assert [t.replace("↵", "") for t in texts] == record["tokens"]  # one span per token, text as written
    assert "".join(texts).replace("↵", "") == record["response"]  # reads as the response, newlines kept
    assert " carry" in texts
    styles = [s.get_attribute("style") for s in spans.all()[:12]]
    assert all("background:rgb" in c for c in styles)  # coloured by credit (GRPO: one colour a response)
    # the band view's cells are sized to their tokens: whole words, not "th…"
    page.wait_for_selector(".st-key-rollout_heatmap .js-plotly-plot")
    assert "␣carry" in page.locator(".st-key-rollout_heatmap").text_content()
    pos = texts.index(" carry")
    after(page, lambda: spans.nth(pos).click())
    assert any(f"token {pos} " in h for h in page.locator("h3").all_inner_texts())
    assert f"pos={pos}" in page.url
    assert "sel" in page.locator(SPANS).nth(pos).get_attribute("class")  # outlined after the rerun


def test_a_long_subword_response_is_windowed_with_an_overview(page):
    open_view(page, "rollout?run=subword&rollout=0")
    page.wait_for_selector(SPANS)
    assert page.locator(SPANS).count() == 512  # the window, not all 870 tokens
    page.wait_for_selector(".st-key-rollout_window_overview .js-plotly-plot")  # drawn after the text
    assert page.locator(".st-key-rollout_window_overview .js-plotly-plot").count() == 1
    assert "0–511 of" in shown_choice(page, "rollout_window")


def test_locked_scale_survives_a_beta_move(page):
    open_view(page, "tune?run=oracle&rollout=0")
    page.wait_for_selector(".st-key-tune_heatmap .js-plotly-plot")

    def move_beta(presses: int, key: str) -> None:
        """Move β and wait for the run that got its last value, drawn (one run per debounced value)."""
        before = page.evaluate(HEATMAP_Z, "tune_heatmap")
        set_by_keys(page, "tune_beta_style", presses, key)
        wait_heatmap_change(page, "tune_heatmap", before)

    unlocked = shown(page, "tune_heatmap", COLOURBAR)
    move_beta(10, "ArrowRight")
    assert shown(page, "tune_heatmap", COLOURBAR) != unlocked  # unlocked, a β move rescales
    after(page, lambda: page.locator(".st-key-tune_lock_toggle label").click())
    assert "zlock=" in page.url
    locked = shown(page, "tune_heatmap", COLOURBAR)
    move_beta(16, "ArrowLeft")  # down, so the tuned credit shrinks inside the locked scale
    assert shown(page, "tune_heatmap", COLOURBAR) == locked  # locked: same scale, new colours
    assert "zlock=" in page.url


def _second_estimator() -> tuple[str, str, float]:
    """An estimator besides grpo with a bounded float parameter other than epsilon (from the registry)."""
    for name in registry.names():
        schema = registry.config_schema(name)
        if name == "grpo" or not schema["model_free"]:
            continue
        for f in schema["fields"]:
            if f["type"] == "float" and f["name"] != "epsilon" and f["low"] is not None and f["high"]:
                value = round(min(f["high"], (f["default"] or 0) + (f["high"] - f["low"]) / 4), 2)
                if value != f["default"]:
                    return name, f["name"], value
    raise AssertionError("no model-free estimator besides grpo has a bounded float parameter to link")


def test_shared_link_restores_a_configured_compare_view(page):
    other, field, value = _second_estimator()
    link = (
        f"compare?run=oracle&rollout=3&ests=grpo,{other}&{other}.{field}={value}"
        f"&grpo.norm_by_std=false&diff={other},grpo&scale=row&tab=difference"
    )
    open_view(page, link)
    page.wait_for_selector(".st-key-compare_difference .js-plotly-plot")
    assert "rollout #3" in page.locator("h1").first.inner_text()
    chosen = page.locator(".st-key-compare_estimators").inner_text()
    assert "grpo" in chosen and other in chosen
    # a lazy expander: opening it reruns the page, which draws its widgets (wait for that run, not the first
    # element: the slider's value comes with it)
    after(page, lambda: page.get_by_text("Parameters", exact=True).click())
    # its container can be in the page a moment before the slider in it is drawn: wait for its text
    page.wait_for_function(
        "(key) => (document.querySelector(`.st-key-${key}`)?.textContent || '').trim() !== ''",
        arg=f"compare_cfg_{other}_{field}",
    )
    assert f"{value:g}" in shown_choice(page, f"compare_cfg_{other}_{field}")
    assert not page.locator(".st-key-compare_cfg_grpo_norm_by_std input").is_checked()
    assert other in shown_choice(page, "compare_diff_a")
    assert "grpo" in shown_choice(page, "compare_diff_b")
    ticks = page.evaluate(
        "() => document.querySelector('.st-key-compare_difference .js-plotly-plot').layout.yaxis.ticktext"
    )
    assert ticks[0].startswith(f"grpo − {other}")
    for part in (
        f"{other}.{field}={value}",
        "grpo.norm_by_std=False",
        f"diff={other}%2Cgrpo",
        "scale=row",
        "tab=difference",
    ):
        assert part in page.url, part  # the view's URL is still the whole view: it can be shared again
    assert page.locator("[data-testid=stAlert]").filter(has_text="cannot be honoured").count() == 0
    open_tab(page, "Small multiples")  # the per-row scales toggle sits with the small multiples
    page.wait_for_selector(".st-key-compare_scale input")
    assert page.locator(".st-key-compare_scale input").is_checked()
    assert "scale=row" in page.url and f"{other}.{field}={value}" in page.url


def test_a_link_that_cannot_be_honoured_says_so_and_falls_back(page):
    open_view(page, "rollout?run=demo&rollout=0&est=no_such_estimator&scale=log&grpo.epsilon=abc&pos=99999")
    page.wait_for_selector(SPANS)
    alerts = page.locator("[data-testid=stAlert]").filter(has_text="cannot be honoured").all_inner_texts()
    text = "\n".join(alerts)
    for name in ("est=no_such_estimator", "scale=log", "grpo.epsilon=abc", "pos=99999"):
        assert name in text, (name, text)
    assert "Rollout #0" in page.locator("h1").first.inner_text()  # fell back to the defaults
    assert "est=grpo" in page.url and "scale=auto" in page.url and "grpo.epsilon" not in page.url
    open_view(page, "rollout?run=no_such_run&rollout=3")
    assert "run=no_such_run" in page.locator("[data-testid=stAlert]").first.inner_text()


CLASSES = [["carry word", "phrases", "carry"], ["answer digits", "regex", "^\\d$"]]


def _classes_of_the_bars(page) -> list[str]:
    """The token classes the class-mass bars are drawn for (each bar's label: `class (n% of tokens)`)."""
    labels = page.evaluate(
        "() => document.querySelector('.st-key-compare_mass .js-plotly-plot').data"
        ".filter(t => t.type === 'bar').flatMap(t => [...t.y])"
    )
    return [label.rsplit(" (", 1)[0] for label in labels]


def test_a_link_with_token_classes_restores_them(page):
    link = quote(json.dumps(CLASSES))
    open_view(page, f"compare?run=demo&rollout=3&tab=agreement&classes={link}")  # the class-mass tab
    page.wait_for_selector(".st-key-compare_mass .js-plotly-plot")
    bars = _classes_of_the_bars(page)
    assert set(bars) == {"carry word", "answer digits", "other"}
    assert page.locator("[data-testid=stAlert]").filter(has_text="cannot be honoured").count() == 0
    assert json.loads(parse_qs(urlsplit(page.url).query)["classes"][0]) == CLASSES  # still in the link
    page.get_by_text("Token classes of this run", exact=True).click()
    page.wait_for_selector("[class*=st-key-token_class_table]")
    expander = page.locator("[data-testid=stExpander]").filter(has_text="Token classes of this run")
    assert "this session's classes" in expander.inner_text()


def test_a_link_with_a_class_that_cannot_be_used_warns_and_falls_back(page):
    bad = quote(json.dumps([["fine", "regex", "a"], ["broken", "regex", "("]]))
    open_view(page, f"compare?run=demo&rollout=3&tab=agreement&classes={bad}")
    page.wait_for_selector(".st-key-compare_mass .js-plotly-plot")
    text = "\n".join(
        page.locator("[data-testid=stAlert]").filter(has_text="cannot be honoured").all_inner_texts()
    )
    assert "classes=" in text and "broken" in text and "not a regex" in text, text
    bars = _classes_of_the_bars(page)
    assert "digits" in bars and "broken" not in bars  # the run's own (default) classes
    assert "classes=" not in page.url


BASELINE_Z = (
    "() => document.querySelector('.st-key-tune_baseline_heatmap .js-plotly-plot').data"
    ".filter(t => t.type === 'heatmap').map(t => t.z)"
)  # typed arrays as sent ({dtype, bdata})


def test_tune_against_the_summed_reward_shows_what_estimate_channel_all_prints(page, server, tmp_path):
    rollout = 352
    open_view(page, f"tune?run=demo&rollout={rollout}&est=entropy&base=side+by+side&against=summed")
    page.wait_for_selector(".st-key-tune_baseline_heatmap .js-plotly-plot")
    bands = [np.asarray(decode(z), dtype=np.float64).reshape(-1) for z in page.evaluate(BASELINE_Z)]
    shown = np.concatenate(bands)
    shown = shown[np.isfinite(shown)]  # one row; a band's unused cells are NaN
    out = tmp_path / "all.parquet"
    assert (
        run_cli_here(
            "estimate",
            "--db",
            str(server.db),
            "--run",
            "demo",
            "--estimator",
            "entropy",
            "--channel",
            "all",
            "--out",
            str(out),
        ).returncode
        == 0
    )
    frame = pq.read_table(out).to_pandas()
    expected = frame[frame["rollout_id"] == rollout].sort_values("pos")["advantage"].to_numpy()
    np.testing.assert_allclose(shown, expected, atol=1e-5)
    assert "summed reward" in page.locator(".st-key-tune_baseline_heatmap").text_content()
    assert "against=summed" in page.url
