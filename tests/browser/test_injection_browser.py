"""Model text that tries HTML/JS, markdown links and LaTeX, opened in headless chromium: shown as text.

The `hostile` run's prompt, response and every token carry the payloads of `conftest.PAYLOADS`. In each
view: no script ran (`window.__xss` stays undefined), no `<img src=x>` element, no `javascript:` link,
no bold or KaTeX made from model text, and the literal text can be read (in the text blocks of
"Prompt and response", and in the heatmap's hover label).
"""

from __future__ import annotations

import pytest

from tests.browser.conftest import XSS_IMG, XSS_MARKDOWN, XSS_SCRIPT, open_view, settle, token_point

pytestmark = pytest.mark.browser

INJECTED = """() => ({
  xss: typeof window.__xss,
  img: document.querySelectorAll('img[src="x"], img[onerror]').length,
  js_links: [...document.querySelectorAll('a[href]')]
    .filter(a => /^\\s*javascript:/i.test(a.getAttribute('href'))).length,
  bold: [...document.querySelectorAll('strong, b')].filter(e => e.textContent.trim() === 'bold').length,
  katex: document.querySelectorAll('.katex, .katex-mathml, math').length,
})"""
CLEAN = {"xss": "undefined", "img": 0, "js_links": 0, "bold": 0, "katex": 0}


def hover_text(page, key: str, col: int = 0, row: int = 0) -> str:
    """Hover token `col` (row `row` of its band) of heatmap `key` and return its label."""
    label = page.locator(f".st-key-{key} .hoverlayer .hovertext").filter(has_text=f"pos {col}")
    settle(page)  # a rerun in progress replaces the figure under the mouse
    for attempt in range(8):  # plotly hovers on mousemove; the first move can land before it listens
        x, y = token_point(page, key, col, row)
        page.mouse.move(0, 0)  # leave and come back: a move to the same point fires no new hover
        page.mouse.move(x - 2 + attempt % 4, y, steps=4)
        try:
            label.first.wait_for(state="attached", timeout=2_000)
            break
        except Exception:  # noqa: BLE001 - retried, then the final wait below reports it
            continue
    label.first.wait_for(state="attached")
    return label.first.text_content()


def show_prompt_and_response(page, label: str) -> str:
    page.get_by_text(label, exact=True).first.click()
    page.wait_for_selector("pre.cl-text-block")
    return "\n".join(page.locator("pre.cl-text-block").all_inner_texts())


@pytest.mark.parametrize(
    "path, heatmap, text_panel",
    [
        ("rollout?run=hostile&rollout=0", "rollout_heatmap", "Prompt and response"),
        ("group?run=hostile&rollout=0", "group_heatmap", "Prompt"),  # the group's facts, then its one prompt
        ("compare?run=hostile&rollout=0", None, None),
        ("resample?run=hostile&rollout=0", "resample_heatmap", "Prompt and response"),
    ],
)
def test_model_text_is_inert_and_readable(page, path, heatmap, text_panel):
    open_view(page, path)
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert page.evaluate(INJECTED) == CLEAN

    if heatmap is not None:
        code = show_prompt_and_response(page, text_panel)
        for payload in (XSS_SCRIPT, XSS_IMG, XSS_MARKDOWN, "$\\alpha$"):
            assert payload in code
        # token 0 is the <script> payload, token 1 the <img>: their hover labels show them literally
        assert XSS_SCRIPT in hover_text(page, heatmap, col=0)
        assert XSS_IMG in hover_text(page, heatmap, col=1)
    else:
        label = hover_text(page, "compare_multiples", col=0)
        assert XSS_SCRIPT in label
    if heatmap == "rollout_heatmap":  # "why this credit" names token 0 verbatim, in the token's facts
        blocks = page.locator("pre.cl-text-block").all_inner_texts()
        assert any(t.startswith("token") and XSS_SCRIPT in t for t in blocks), blocks
    settle(page)
    assert page.evaluate(INJECTED) == CLEAN


@pytest.mark.parametrize(
    "path",
    [
        "rollout?run=hostile&rollout=0&tab=strips",
        "group?run=hostile&rollout=0&tab=tree",
        "compare?run=hostile&rollout=0&tab=difference",
        "compare?run=hostile&rollout=0&tab=agreement",
        "resample?run=hostile&rollout=0&tab=samples",
        "resample?run=hostile&rollout=0&tab=model",
    ],
)
def test_model_text_is_inert_in_every_tab(page, path):
    """A view draws one tab at a time (`sections.lazy_tabs`): the tabs a fresh load leaves closed, opened by a
    link, show the model's text as inert as the first."""
    open_view(page, path)
    page.wait_for_selector(".js-plotly-plot .main-svg")
    assert "tab=" + path.split("tab=")[1] in page.url
    settle(page)
    assert page.evaluate(INJECTED) == CLEAN
