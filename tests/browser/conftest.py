"""A real `streamlit run` server on a free port over a tmp store, and headless Debian chromium."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.serve import Server
from app.testing import CHROMIUM, launch, wait_idle
from backend.demo.subword import subword_records
from backend.ingest import import_records
from backend.ingest.bundled import import_bundled
from backend.store import Store
from tests.conftest import make_records

SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"

# Model text that tries to run script, load an image, render markdown/links and LaTeX.
XSS_SCRIPT = "<script>window.__xss=1</script>"
XSS_IMG = '<img src=x onerror="window.__xss=1">'
XSS_MARKDOWN = "**bold** [link](javascript:alert(1))"
XSS_LATEX = "$\\alpha$"
PAYLOADS = (XSS_SCRIPT, XSS_IMG, XSS_MARKDOWN, XSS_LATEX)


def hostile_records(group_size: int = 3, length: int = 12) -> list[dict]:
    """One group whose prompt, response and every token carry the payloads."""
    records = []
    for i in range(group_size):
        ids = [(i + t) % 7 if t < 2 else (3 * i + t) % 11 for t in range(length)]
        records.append(
            {
                "prompt": " ".join(PAYLOADS),
                "response": " ".join(PAYLOADS[(i + k) % 4] for k in range(4)),
                "step": 0,
                "token_ids": ids,
                "tokens": [PAYLOADS[t % len(PAYLOADS)] for t in range(length)],
                "logprobs": [-0.1 * (t + 1) for t in range(length)],
                "entropies": [0.05 * t for t in range(length)],
                "rewards": {"task": float(i % 2), "style": -float(i == 2)},
                "token_rewards": {"style": [0.0] * (length - 1) + [-float(i == 2)]},
                "meta": {"ground_truth": "1"},
            }
        )
    return records


@pytest.fixture(scope="session")
def server(tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make browser-deps)")
    root = tmp_path_factory.mktemp("browser")
    db = root / "runs.duckdb"
    with Store(db) as store:
        import_bundled(store, quiet=True)
        import_records(store, "small", make_records(n_groups=2, group_size=4, steps=2), content_key="small")
        import_records(store, "hostile", hostile_records(), content_key="hostile-browser")
        # word/subword tokens: a byte-level BPE trained in-repo (one 870-token response for windowing),
        # and the importer's simple tokenization (records without token ids, no model)
        import_records(store, "subword", subword_records(groups=2, long_response=700), content_key="subword")
        simple = [{k: v for k, v in r.items() if k not in ("token_ids", "tokens")}
                  for r in subword_records(groups=1)]
        import_records(store, "simple", simple, content_key="simple-tokens")
    with Server(db, log=root / "streamlit.log") as srv:
        yield srv


@pytest.fixture(scope="session")
def browser():
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - browser tests only

    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make browser-deps)")
    with sync_playwright() as p:
        b = launch(p)
        yield b
        b.close()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report


@pytest.fixture
def page(browser, server, request):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.base_url = server.url
    yield pg
    rep = getattr(request.node, "rep_call", None)
    if rep is not None and rep.failed:
        SCREENSHOTS.mkdir(exist_ok=True)
        pg.screenshot(path=str(SCREENSHOTS / f"{request.node.name}.png"), full_page=True)
        log = Path(server.log) if server.log else None
        if log and log.exists():
            shutil.copy(log, SCREENSHOTS / f"{request.node.name}.streamlit.log")
    context.close()


def open_view(pg, path: str) -> None:
    pg.goto(f"{pg.base_url}/{path}")
    wait_idle(pg)
    assert pg.locator("[data-testid=stException]").count() == 0, pg.locator(
        "[data-testid=stException]"
    ).inner_text()


# Page coordinates of token `pos` (row `row` of its band) in heatmap `key`: cells are sized to their token
# text, so a token's place comes from the figure (the click layer's markers, else the band traces' cell
# edges), converted with plotly's axes.
TOKEN_POINT = """([key, pos, row]) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  const box = gd.querySelector('.nsewdrag').getBoundingClientRect();
  const xa = gd._fullLayout.xaxis, ya = gd._fullLayout.yaxis;
  const at = (x, y) => [box.left + xa.l2p(x), box.top + ya.l2p(y)];
  for (const t of gd._fullData) {
    if (t.type === 'scatter' && t.customdata) {
      const hits = [...t.customdata.keys()].filter(i => t.customdata[i][0] === pos);
      if (hits.length) { const i = hits[Math.min(row, hits.length - 1)]; return at(t.x[i], t.y[i]); }
    }
  }
  for (const t of gd._fullData) {
    if (t.type !== 'heatmap' || !t.customdata) continue;
    for (let r = 0; r < t.customdata.length; r++) {
      const j = t.customdata[r].findIndex(c => c && c[0] === pos);
      if (j >= 0 && r >= row) return at((t.x[j] + t.x[j + 1]) / 2, (t.y[r] + t.y[r + 1]) / 2);
    }
  }
  return null;
}"""


def token_point(pg, key: str, pos: int, row: int = 0) -> tuple[float, float]:
    pg.wait_for_selector(f".st-key-{key} .nsewdrag")
    pg.locator(f".st-key-{key} .js-plotly-plot").scroll_into_view_if_needed()
    point = pg.evaluate(TOKEN_POINT, [key, pos, row])
    assert point is not None, f"token {pos} is not drawn in {key}"
    return point[0], point[1]


# The z values of every band of the Plotly figure in the element with key `key`, as JSON; null while
# Streamlit is replacing the figure (a rerun), so a wait on "changed" never reads a half-drawn page.
HEATMAP_Z = ("(key) => { const el = document.querySelector(`.st-key-${key} .js-plotly-plot`);"
             " return el && el.data ? JSON.stringify(el.data.map(t => t.z)) : null; }")


def wait_heatmap_change(page, key: str, before: str) -> None:
    """Wait until the heatmap `key` is drawn again with other values than `before`."""
    page.wait_for_function(f"(b) => {{ const z = ({HEATMAP_Z})('{key}'); return z !== null && z !== b; }}",
                           arg=before)

