"""AppTest fixtures: a real DuckDB store in a tmp dir with the bundled runs, a small run and a hostile one."""

from __future__ import annotations

import base64
import html
import json
import re
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from app import keys
from backend.ingest import import_records
from backend.store import Store
from tests.conftest import copy_store, make_records

MAIN = Path(__file__).resolve().parents[2] / "app" / "main.py"
SCRIPT = "<script>alert(1)</script>"
IMG = "<img src=x onerror=alert(1)>"


def hostile_records() -> list[dict]:
    """A run whose prompt, response and token texts try to inject HTML, markdown and LaTeX."""
    records = make_records(n_groups=1, group_size=3, seed=5)
    for rec in records:
        rec["prompt"] = f"{SCRIPT} **bold** $x^2$"
        rec["response"] = f"{IMG} {SCRIPT}"
        rec["tokens"] = [IMG if i % 2 else SCRIPT for i in range(len(rec["token_ids"]))]
    return records


@pytest.fixture(scope="session")
def template_db(bundled_template, tmp_path_factory) -> Path:
    path = copy_store(bundled_template, tmp_path_factory.mktemp("store") / "runs.duckdb")
    with Store(path) as store:
        import_records(store, "small", make_records(n_groups=2, group_size=4, steps=3), content_key="small")
        import_records(store, "hostile", hostile_records(), content_key="hostile")
    return path


@pytest.fixture
def app_db(template_db, tmp_path) -> Path:
    """A private copy of the template store (tests may write to it)."""
    return copy_store(template_db, tmp_path / "runs.duckdb")


# the lazy expanders that hold the tables some tests read (Compare: the class shares and the class editor;
# Tune: the replay's β per step), open as a user opens them
COMPARE_OPEN = (keys.COMPARE_NUMBERS_OPEN, keys.CLASS_EDITOR_OPEN)
TUNE_OPEN = (keys.TUNE_REPLAY_TABLE_OPEN,)


def open_app(
    db: Path, page: str | None = None, query: dict | None = None, timeout: float = 120, opened: tuple = ()
):
    """Open the app as a link to `pages/<page>.py` does (the landing page when None): one script run of
    the entry point and that view, as a fresh browser tab has it, with the lazy expanders whose keys are in
    `opened` open (`app.ui.widgets.lazy_expander`: as if the user had opened them). Returns the AppTest."""
    at = AppTest.from_file(str(MAIN), default_timeout=timeout)
    at.session_state["app_db"] = str(db)
    for key in opened:
        at.session_state[key] = True
    for k, v in (query or {}).items():
        at.query_params[k] = v
    if page is not None:
        at.switch_page(f"../pages/{page}.py")
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


# each view's lazy tabs (`app.ui.sections.lazy_tabs`): the session key that opens one of them
TAB_KEYS = {
    "compare": keys.COMPARE_TAB,
    "group": keys.GROUP_TAB,
    "oracle": keys.ORACLE_TAB,
    "resample": keys.RESAMPLE_TAB,
    "rollout": keys.ROLLOUT_TAB,
    "trends": keys.TRENDS_TAB,
    "tune": keys.TUNE_TAB,
}


def every_tab(at, page: str) -> Iterator[str]:
    """Open each tab of view `page` in turn, the one open now last (a test that checks every section of a
    view checks each tab's content): yields the label of the tab just opened. None on a view without tabs."""
    labels = [t.label for t in at.tabs]
    if not labels:
        return
    now = at.session_state[TAB_KEYS[page]]
    for label in [*(label for label in labels if label != now), now]:
        open_tab(at, TAB_KEYS[page], label)
        yield label


def open_tab(at, key: str, label: str):
    """Open the tab labelled `label` of a view's lazy tabs (`app.ui.sections.lazy_tabs`, session key `key`,
    e.g. keys.TUNE_TAB), as a click on it does: the page is rerun with that tab's content drawn."""
    at.session_state[key] = label
    at.run()
    assert not at.exception, [e.message for e in at.exception]
    return at


def token_facts(at) -> list[str]:
    """The lines of the token's facts beside "Why this credit" (token, class, logprob, entropy, value, tree
    node, β): one text block (`app.ui.panels.why_this_credit`)."""
    (facts,) = [b for b in text_blocks(at) if b.startswith("token ")]
    return facts.splitlines()


def text_blocks(at) -> list[str]:
    """The text of the page's monospace blocks (`app.ui.text.text_block`: a prompt, a response, a derivation,
    a command line), unescaped: what the browser shows. An html element may hold several, each under its
    title (`app.ui.text.text_blocks`): every one of them, in order."""
    block = re.compile(r'<pre class="cl-text-block"[^>]*>(.*?)</pre>', re.DOTALL)
    return [html.unescape(b) for h in at.html for b in block.findall(h.value)]


def decode(value):
    """Plotly 7 typed arrays ({"dtype", "bdata", "shape"}) to numpy; other values unchanged."""
    if isinstance(value, dict) and "bdata" in value:
        arr = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = value.get("shape")
        if shape:
            dims = [int(s) for s in str(shape).split(",")] if isinstance(shape, str) else list(shape)
            arr = arr.reshape(dims)
        return arr
    return value


def chart(at, key: str) -> dict:
    """The figure JSON of the plotly chart with widget key `key` (or the n-th chart for an int)."""
    charts = at.get("plotly_chart")
    for c in charts:
        spec = json.loads(c.proto.spec)
        if key in (c.proto.id or "") or key in json.dumps(spec.get("layout", {}).get("meta", "")):
            return spec
    raise AssertionError(f"no chart {key!r}; have {[c.proto.id for c in charts]}")


def heatmap_z(spec: dict) -> np.ndarray:
    return np.asarray(decode(spec["data"][0]["z"]), dtype=np.float64)
