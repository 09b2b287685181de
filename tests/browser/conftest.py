"""A real `streamlit run` server on a free port over a tmp store, headless Debian chromium, and waits on
conditions: the script run a page asked for has finished (read from its WebSocket) and the page shows it.

Never a fixed delay, never the first figure found: after an action a test calls `settle(page)` (or
`after(page, action)`), then reads; a figure is read with `shown(page, key, path)`, which waits until the
browser draws what the last finished run sent.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import time
from pathlib import Path
from unittest import mock

import pytest
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from app.server.launch import Server
from backend.demo.subword import subword_records
from backend.ingest import import_records
from backend.store import Store
from bench.chromium import CHROMIUM
from tests.conftest import copy_store, free_test_port, make_records

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
def server(bundled_template, tmp_path_factory):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make browser-deps)")
    root = tmp_path_factory.mktemp("browser")
    db = copy_store(bundled_template, root / "runs.duckdb")
    with Store(db) as store:
        import_records(store, "small", make_records(n_groups=2, group_size=4, steps=2), content_key="small")
        import_records(store, "hostile", hostile_records(), content_key="hostile-browser")
        # word/subword tokens: a byte-level BPE trained in-repo (one 870-token response for windowing),
        # and the importer's simple tokenization (records without token ids, no model)
        import_records(store, "subword", subword_records(groups=2, long_response=700), content_key="subword")
        simple = [
            {k: v for k, v in r.items() if k not in ("token_ids", "tokens")}
            for r in subword_records(groups=1)
        ]
        import_records(store, "simple", simple, content_key="simple-tokens")
    with serving(db, warm=True, log=root / "streamlit.log") as srv:
        yield srv


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.when == "call":
        item.rep_call = report


class ScriptRuns:
    """One page's Streamlit session as its WebSocket shows it: the reruns the browser asked for, the script
    runs the server started and finished, the widget values sent and the figures each run sent.

    Streamlit's status widget shows a run only after 500 ms and a slider sends its value after a debounce,
    so the page alone cannot say whether the run an action asked for has finished; the protocol can: every
    run starts with a `new_session` message and ends with `script_finished` (FINISHED_EARLY_FOR_RERUN when
    a newer request or `st.rerun` replaces it)."""

    def __init__(self, page):
        self.requests = 0  # rerun requests sent (a widget change, a navigation, the first load)
        self.pending = False  # a request sent that no run has started for yet
        self.running = False
        self.widgets: dict[str, object] = {}  # widget id -> the WidgetState last sent
        self.figures: dict[str, str] = {}  # chart element id -> the figure JSON last sent
        self._cached: dict[str, ForwardMsg] = {}  # Streamlit sends a repeated message as its hash
        page.on("websocket", self._attach)

    def _attach(self, ws) -> None:
        if ws.url.split("?")[0].endswith("/_stcore/stream"):
            ws.on("framesent", self._sent)
            ws.on("framereceived", self._received)

    def _sent(self, payload) -> None:
        if isinstance(payload, str):
            return
        msg = BackMsg.FromString(payload)
        if msg.WhichOneof("type") == "rerun_script":
            self.requests += 1
            self.pending = True
            for widget in msg.rerun_script.widget_states.widgets:
                self.widgets.pop(widget.id, None)  # latest last: a widget's id can change with its options
                self.widgets[widget.id] = widget

    def _received(self, payload) -> None:
        if isinstance(payload, str):
            return
        msg = ForwardMsg.FromString(payload)
        if msg.hash:
            self._cached[msg.hash] = msg
        if msg.WhichOneof("type") == "ref_hash":
            msg = self._cached.get(msg.ref_hash, msg)
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            self.running, self.pending = True, False
        elif kind == "script_finished":
            self.running = msg.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN  # a new run follows
        elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element":
            element = msg.delta.new_element
            if element.WhichOneof("type") == "plotly_chart":
                self.figures.pop(element.plotly_chart.id, None)  # latest last (ids change with the figure)
                self.figures[element.plotly_chart.id] = element.plotly_chart.spec

    def sent(self, key: str):
        """The value last sent for the widget with key `key` (None before any)."""
        for widget_id, widget in reversed(self.widgets.items()):
            if widget_id.endswith(f"-{key}"):
                kind = widget.WhichOneof("value")
                value = getattr(widget, kind) if kind else None
                return list(value.data) if hasattr(value, "data") else value
        return None

    def figure(self, key: str) -> dict:
        """The figure the server last sent for the chart with key `key`."""
        for element_id, spec in reversed(self.figures.items()):
            if element_id.endswith(f"-{key}"):
                return json.loads(spec)
        raise AssertionError(f"no figure {key!r} was sent; have {list(self.figures)}")


def runs(page) -> ScriptRuns:
    """The page's `ScriptRuns` (attached when the page was made, before any navigation)."""
    if not hasattr(page, "script_runs"):
        page.script_runs = ScriptRuns(page)
    return page.script_runs


def fresh_runs(page) -> ScriptRuns:
    """A new `ScriptRuns` for a tab a test reuses: the last test's stops listening."""
    if hasattr(page, "script_runs"):
        page.remove_listener("websocket", page.script_runs._attach)
    page.script_runs = ScriptRuns(page)
    return page.script_runs


def wait_until(page, condition, what: str, timeout: float = 60.0) -> None:
    """Wait until `condition()` (a check of state the page's events update) holds; Playwright delivers
    those events only while it waits, so the wait is in short slices."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        page.wait_for_timeout(20)


# The page shows no run in progress: no running icon, no element left stale by a run.
DRAWN_IDLE = (
    "() => document.querySelector('[data-testid=stApp]') !== null"
    " && !document.querySelector('[data-testid=stStatusWidgetRunningIcon]')"
    " && document.querySelectorAll('[data-stale=true]').length === 0"
)


def settle(page, timeout: float = 60.0) -> None:
    """Wait until no rerun the page asked for is waiting or running, and the page shows the last run."""
    watch = runs(page)
    wait_until(
        page, lambda: not watch.pending and not watch.running, "Streamlit's script run to finish", timeout
    )
    page.wait_for_function(DRAWN_IDLE, timeout=timeout * 1000)


@contextlib.contextmanager
def serving(db: Path, warm: bool = False, **kwargs):
    """`Server` on a port of this worker's block (tests/conftest.py). Like every served app it does not watch
    the sources (`streamlit_command`), so an edit to the checkout during a run puts no "File change" prompt
    on a page. Only a server started with `warm` opens every view in the background first
    (app/server/warmup.py): the session's server does, as `make app` does; a module's own server, for one or
    two pages, leaves that work out."""
    with mock.patch.dict(os.environ, {"CREDITLENS_WARMUP": "1" if warm else "0"}):
        server = Server(db, port=free_test_port(), **kwargs).__enter__()
    try:
        yield server
    finally:
        server.__exit__()


def after(page, action, timeout: float = 60.0) -> None:
    """Do `action` (a click, a fill, key presses), wait until the browser has asked for a rerun, then
    `settle`."""
    watch = runs(page)
    before = watch.requests
    action()
    wait_until(page, lambda: watch.requests > before, "the browser to ask for a rerun", timeout)
    settle(page, timeout)


def set_by_keys(page, key: str, presses: int, direction: str = "ArrowRight") -> float:
    """Move slider `key` by `presses` key presses; returns its new value once the run that received that
    value has finished (a slider sends its value after a debounce, so several presses can be several
    runs, and a wait for the first redraw would read the page between them)."""
    thumb = page.locator(f".st-key-{key} input[type=range]")
    thumb.focus()
    for _ in range(presses):
        thumb.press(direction)
    value = float(thumb.input_value())
    watch = runs(page)
    wait_until(
        page,
        lambda: watch.sent(key) is not None and _close(watch.sent(key), value),
        f"slider {key} to send {value}",
    )
    settle(page)
    return value


def _close(sent, value: float) -> bool:
    first = sent[0] if isinstance(sent, list) else sent
    return abs(float(first) - value) < 1e-9


# The value at a dotted path (`layout.coloraxis.colorbar.ticktext`, `data.0.z`) of the Plotly figure drawn
# in the element with key `key`, as JSON; null while there is none.
DRAWN = """([key, path]) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  if (!gd || !gd.layout) return null;
  let v = gd;
  for (const part of path.split('.')) { if (v == null) return null; v = v[part]; }
  return JSON.stringify(v === undefined ? null : v);
}"""


def shown(page, key: str, path: str):
    """What the page draws at `path` of figure `key`, once the script runs have settled and the drawn figure
    is the one the last run sent (Streamlit themes a figure, so compare a path it leaves alone)."""
    settle(page)
    want = runs(page).figure(key)
    for part in path.split("."):
        want = want[int(part)] if isinstance(want, list) else want.get(part)
    page.wait_for_function(
        f"([key, path, want]) => ({DRAWN})([key, path]) === JSON.stringify(want)", arg=[key, path, want]
    )
    return want


@pytest.fixture(scope="session")
def tab(browser):
    """One browser tab per test process, which every test's `page` navigates in turn.

    Each test still gets a new Streamlit session (a navigation opens a new WebSocket, and the server keeps
    nothing of the last one for it), no cookies and a fresh `ScriptRuns`. What the tab keeps is the
    browser's: the HTTP cache and the renderer process, whose V8 has compiled Streamlit's and Plotly's
    scripts once. A new context per test compiled them again on every test: about 4 s of Chromium's CPU
    a page (7.7 s in a new context, 3.5 s in the same tab, measured on Rollout, Tune, Group and Runs).
    The tab prefers reduced motion (Streamlit then skips its animations): Chromium's GPU process spent
    5.1 s of CPU on 10 loads of five views in one tab without it, 1.7 s with it."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000}, reduced_motion="reduce")
    yield context.new_page()
    context.close()


@pytest.fixture
def page(tab, server, request):
    pg = tab
    pg.context.clear_cookies()
    fresh_runs(pg)  # before the first navigation: the page's WebSocket is watched from its start
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
    pg.goto("about:blank")  # ends this test's Streamlit session before the next test opens its own


def open_view(pg, path: str) -> None:
    """Open `path` and wait until its first script run has finished and is drawn."""
    after(pg, lambda: pg.goto(f"{pg.base_url}/{path}"))
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
HEATMAP_Z = (
    "(key) => { const el = document.querySelector(`.st-key-${key} .js-plotly-plot`);"
    " return el && el.data ? JSON.stringify(el.data.map(t => t.z)) : null; }"
)


def open_tab(page, label: str) -> None:
    """Click the tab labelled `label` of a view's lazy tabs (`app.ui.sections.lazy_tabs`: its content is drawn
    by the rerun the click asks for) and wait until that run is drawn."""
    after(page, lambda: page.get_by_role("tab", name=label, exact=True).click())


def wait_heatmap_change(page, key: str, before: str) -> None:
    """Wait until the heatmap `key` is drawn again with other values than `before`."""
    page.wait_for_function(
        f"(b) => {{ const z = ({HEATMAP_Z})('{key}'); return z !== null && z !== b; }}", arg=before
    )
