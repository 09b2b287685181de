"""Fresh page loads (`python -m bench app`, first table): each view opened in a new browser context (no
HTTP cache, no Streamlit session: a link opened, a reload, a new tab) against a trivial Streamlit page
served the same way on the same machine in the same run, so the ratio is what the app adds. A second
baseline is the trivial page with one small Plotly chart: Streamlit loads Plotly's code (several MB of
script, compiled by the browser) only for a page that draws a chart, so that page is the floor of every
view that draws one, and the second ratio is what the view adds to it. The third baseline, the trivial
page with one three-row table, is the same for the data grid's code: the floor of a view that draws a
table and no chart (the Explorer, Runs); its row's ratio is that floor against the trivial page. The
fourth, the app's shell with the one-chart page as one of its views, is what every view pays on top of its
floor (the navigation, the sidebar's pickers, the Live toggle).

A load is timed from `goto` until the page's first script run has finished (Streamlit's WebSocket sends
`script_finished`), a later rerun it asked for has finished too, and the browser shows that run: every
chart drawn, nothing stale. "first content" is the moment the view's title is drawn. The last row opens
Trends on a 150-step run (the oracle's synthetic records, `backend.evaluation.synthetic.native_records`):
a view's cost can grow with the run, and a training run has hundreds of steps where the demo has four.
"""

from __future__ import annotations

import contextlib
import re
import statistics
import time
from pathlib import Path

from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

from app import navigation
from app.server.launch import Server, prepare_store
from backend.evaluation import synthetic
from backend.ingest import import_records
from backend.store import Store
from bench.chromium import launch

TRIVIAL = 'import streamlit as st\n\nst.title("Trivial")\nst.write("A trivial page: the baseline.")\n'
ONE_CHART = TRIVIAL + "import plotly.graph_objects as go\n\nst.plotly_chart(go.Figure(go.Bar(y=[1, 3, 2])))\n"
# the floor of a view that draws a table and no chart (the Explorer, Runs): Streamlit loads the data grid's
# code only for a page that draws a table
ONE_TABLE = TRIVIAL + 'st.dataframe({"step": [0, 1, 2], "reward": [0.1, 0.5, 0.4]})\n'
BASELINES = {
    "Trivial page": TRIVIAL,
    "Trivial page + one chart": ONE_CHART,
    "Trivial page + one table": ONE_TABLE,
}
# What the app's shell costs (the navigation, the sidebar's run and rollout pickers, the Live toggle, the
# wide layout, the URL): the one-chart page served as one more view of the app, at /shell. Not a view of
# the product: the entry point is run with that page added to its navigation, in this benchmark only.
SHELL = "App shell + one chart"
SHELL_SCRIPT = """from pathlib import Path

from app import navigation

PAGE = Path(__file__).with_name("one_chart.py")
if not any(path == "shell" for _, _, path, _ in navigation.VIEWS):
    navigation.VIEWS = navigation.VIEWS[:1] + ((str(PAGE), "Shell", "shell", None),) + navigation.VIEWS[1:]
MAIN = Path(navigation.__file__).with_name("main.py")
exec(compile(MAIN.read_text(), str(MAIN), "exec"))
"""
# Each view as a link opens it on the demo store (rollout 3: a group whose scores differ). The landing view
# (the navigation's first) is timed at the root, where a new user lands (its own path, /explorer, serves the
# same script).
QUERIES = {"explorer": "run=demo", "trends": "run=demo", "oracle": "run=oracle", "runs": ""}
VIEWS = tuple(
    (title, f"{path if i else ''}?{QUERIES.get(path, 'run=demo&rollout=3')}".rstrip("?"))
    for i, (_, title, path, _) in enumerate(navigation.VIEWS)
) + (("Trends · 150 steps", "trends?run=steps150"),)  # a long training run: a tick per step took 14.7 s


# The page shows a finished run: its title, every chart drawn, no running icon, nothing stale. Streamlit
# draws an element whose code it has not loaded yet (Plotly, the data grid) as a placeholder skeleton, not
# as that element: a page with skeletons left is not drawn (without that test, every chart counted as
# drawn while Plotly's code was still loading, and a view's load was timed seconds early).
SHOWN = (
    "() => document.querySelector('h1') !== null"
    " && !document.querySelector('[data-testid=stStatusWidgetRunningIcon]')"
    " && document.querySelectorAll('[data-stale=true]').length === 0"
    " && document.querySelectorAll('[data-testid=stSkeleton]').length === 0"
    " && [...document.querySelectorAll('[data-testid=stPlotlyChart]')]"
    ".every(c => c.querySelector('.main-svg') !== null)"
)


class Runs:
    """Script runs of one page as its WebSocket shows them (Streamlit starts a run with `new_session` and
    ends it with `script_finished`; FINISHED_EARLY_FOR_RERUN means another run follows)."""

    def __init__(self, page):
        self.finished = 0
        self.running = False
        page.on("websocket", self._attach)

    def _attach(self, ws) -> None:
        if ws.url.split("?")[0].endswith("/_stcore/stream"):
            ws.on("framereceived", self._received)

    def _received(self, payload) -> None:
        if isinstance(payload, str):
            return
        msg = ForwardMsg.FromString(payload)
        kind = msg.WhichOneof("type")
        if kind == "new_session":
            self.running = True
        elif kind == "script_finished":
            self.running = msg.script_finished == ForwardMsg.FINISHED_EARLY_FOR_RERUN
            self.finished += msg.script_finished != ForwardMsg.FINISHED_EARLY_FOR_RERUN


def fresh_load(browser, url: str, timeout: float = 120.0) -> tuple[float, float, float]:
    """(first content, loaded, page CPU) seconds of `url` in a new context. Page CPU is the time the
    page's renderer spent in tasks (script, style, layout, paint: Chrome's `TaskDuration`), which the
    machine's other load changes far less than wall time."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Performance.enable")
    runs = Runs(page)
    start = time.perf_counter()
    page.goto(url, wait_until="commit")
    page.wait_for_selector("h1", timeout=timeout * 1000)
    first = time.perf_counter() - start
    wait_runs(page, runs, 1, timeout)
    page.wait_for_function(SHOWN, timeout=timeout * 1000, polling=10)
    loaded = time.perf_counter() - start
    metrics = {m["name"]: m["value"] for m in cdp.send("Performance.getMetrics")["metrics"]}
    context.close()
    return first, loaded, metrics["TaskDuration"]


def measure(playwright, db: Path, tmp: Path, rounds: int = 3) -> tuple[list[tuple], list[tuple]]:
    """Rows (name, first visit s, median first content s, median loaded s, ratio to the trivial page, ratio
    to the trivial page with one chart, ratio to the one with one table, median page CPU s, its ratio to
    the one-chart page's), and (what, seconds) of adding an estimator to Compare (target ≤ 1 s): pick it,
    until the rerun is drawn.

    The first visit of a view is its first load after the server started (its caches cold unless the
    server warmed them); the medians are over the `rounds` loads after it. The baselines' loads are
    interleaved with the views' so all see the same machine load."""
    prepare_store(db)
    with Store(db) as store:  # the oracle's synthetic run, one training step per seed: 150 steps of 2 × 4
        import_records(
            store, "steps150", synthetic.native_records(150, prompts=2, group=4), content_key="steps150"
        )
    with contextlib.ExitStack() as servers:
        app = servers.enter_context(Server(db, log=tmp / "app.log"))
        baselines = {}
        for i, (name, source) in enumerate(BASELINES.items()):
            script = tmp / f"baseline{i}.py"
            script.write_text(source)
            baselines[name] = servers.enter_context(Server(db, log=tmp / f"baseline{i}.log", script=script))
        (tmp / "one_chart.py").write_text(ONE_CHART)
        (tmp / "shell.py").write_text(SHELL_SCRIPT)
        shell = servers.enter_context(Server(db, log=tmp / "shell.log", script=tmp / "shell.py"))
        baselines[SHELL] = shell  # its url: /shell?run=demo
        browser = launch(playwright)
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in (*BASELINES, SHELL)}
        for name, path in VIEWS:  # first visits, right after the server answered its health check
            times[name] = [fresh_load(browser, f"{app.url}/{path}")]
        urls = {name: server.url for name, server in baselines.items()} | {
            SHELL: f"{shell.url}/shell?run=demo"
        }
        for name, url in urls.items():
            times[name].append(fresh_load(browser, url))
        for _ in range(rounds):
            for name, url in urls.items():
                times[name].append(fresh_load(browser, url))
            for name, path in VIEWS:
                times[name].append(fresh_load(browser, f"{app.url}/{path}"))
        compare = f"{app.url}/compare?run=demo&rollout=3&ests=grpo,entropy"
        added = [
            (f"Compare: add {name} to grpo, entropy", add_estimator(browser, compare, name)) for name in ADDED
        ]
        browser.close()
    base, chart, table = (statistics.median(t[1] for t in times[name][1:]) for name in BASELINES)
    chart_cpu = statistics.median(t[2] for t in times["Trivial page + one chart"][1:])
    rows = []
    for name, loads in times.items():
        loaded = statistics.median(t[1] for t in loads[1:])
        content = statistics.median(t[0] for t in loads[1:])
        cpu = statistics.median(t[2] for t in loads[1:])
        rows.append(
            (
                name,
                loads[0][1],
                content,
                loaded,
                loaded / base,
                loaded / chart,
                loaded / table,
                cpu,
                cpu / chart_cpu,
            )
        )
    return rows, added


def print_table(rows: list[tuple], added: list[tuple]) -> None:
    print(
        f"{'fresh page load (demo store)':<30} {'first visit':>11} {'first content':>13} {'loaded':>8} "
        f"{'ratio':>6} {'/ chart':>8} {'/ table':>8} {'page CPU':>9} {'/ chart':>8}"
    )
    for name, first_visit, content, loaded, ratio, to_chart, to_table, cpu, cpu_to_chart in rows:
        times = f"{first_visit:>11.2f} {content:>13.2f} {loaded:>8.2f}"
        ratios = f"{ratio:>6.2f} {to_chart:>8.2f} {to_table:>8.2f} {cpu:>9.2f} {cpu_to_chart:>8.2f}"
        print(f"{name:<30} {times} {ratios}")
    print(
        "seconds; medians of fresh loads after the first visit; ratio = loaded / the trivial page's;\n"
        "/ chart = loaded / the trivial page with one Plotly chart's (the floor of a view that draws a "
        "chart: target ≤ 1.3);\n/ table = loaded / the trivial page with one table's (the floor of a view "
        "that draws a table and no chart, the Explorer: target ≤ 1.2);\n"
        f"{SHELL}: the one-chart page inside the app's navigation and sidebar (what every view pays);\n"
        "page CPU = the page's renderer busy in tasks until loaded (Chrome's TaskDuration), and its ratio to "
        "the one-chart page's: what the view makes the browser do, less moved by the machine's other load"
    )
    print(f"\n{'rerun':<46} {'seconds':>8} {'target':>7}")
    for what, seconds in added:
        print(f"{what:<46} {seconds:>8.2f} {1.0:>7.2f}")


ADDED = ("recency", "early_late", "terminal_gae")  # none is on the view by default, so none is cached


def add_estimator(browser, url: str, name: str, timeout: float = 120.0) -> float:
    """Seconds from picking estimator `name` in Compare's multiselect until the rerun is drawn."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    runs = Runs(page)
    page.goto(url)
    wait_runs(page, runs, 1, timeout)
    page.wait_for_function(SHOWN, timeout=timeout * 1000, polling=10)
    box = page.locator(".st-key-compare_estimators input")
    box.click()
    box.fill(name)
    option = page.get_by_role("option", name=re.compile(f"^{name} "))
    option.wait_for()
    before = runs.finished
    start = time.perf_counter()
    option.click()
    wait_runs(page, runs, before + 1, timeout)
    page.wait_for_function(SHOWN, timeout=timeout * 1000, polling=10)
    elapsed = time.perf_counter() - start
    chosen = page.locator(".st-key-compare_estimators").inner_text()
    context.close()
    if name not in chosen:
        raise RuntimeError(f"{url}: Compare does not show {name} after picking it (shows {chosen!r})")
    return elapsed


def wait_runs(page, runs: Runs, finished: int, timeout: float) -> None:
    """Wait until `finished` script runs have finished and none is running."""
    deadline = time.monotonic() + timeout
    while not (runs.finished >= finished and not runs.running):
        if time.monotonic() > deadline:
            raise RuntimeError(f"no finished script run within {timeout:.0f} s")
        page.wait_for_timeout(10)  # Playwright delivers WebSocket events only while it waits
