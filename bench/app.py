"""`python -m bench app [fresh] [--rounds N]`: the app in headless chromium against a real server.
(`python -m bench app big [--tokens N]`: the views on a real-size run against the demo's, bench/app_big.py.)

First the fresh page loads of every view on the demo store against a trivial Streamlit page
(`bench/app_load.py`; `python -m bench app fresh` stops there). Then it measures (1) navigation to a
4096-token rollout until its heatmap is drawn (target < 2 s) and (2) a β slider change until the Tune
heatmap is redrawn (target < 0.5 s for one group), on a tmp store with the bundled runs and a synthetic run
of one group of 8 × 4096-token responses. Saves a screenshot of every view to bench/out/.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

from app.server.launch import Server
from backend.demo.bundled import import_bundled
from backend.ingest import import_records
from backend.store import Store
from bench import app_load
from bench.chromium import CHROMIUM, launch, wait_idle

OUT = Path(__file__).resolve().parent / "out"
WORDS = ["the", "so", "we", "add", "carry", "then", "answer", "is", "step", ",", ".", "1", "2", "7", "\n"]
Z_SUM = (  # every band's z (cells are sized to their tokens: one heatmap trace per band)
    "(key) => { const g = document.querySelector(`.st-key-${key} .js-plotly-plot`);"
    " if (!g || !g.data) return null;"
    " return g.data.map(t => (t.z && typeof t.z.bdata === 'string') ? t.z.bdata : JSON.stringify(t.z))"
    ".join('|'); }"
)
DRAWN = "(key) => !!document.querySelector(`.st-key-${key} .js-plotly-plot .heatmaplayer image`)"


def long_records(length: int = 4096, group: int = 8, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    records = []
    for _ in range(group):
        tokens = [rng.choice(WORDS) for _ in range(length)]
        style = [-1.0 if 100 <= t < 110 and rng.random() < 0.5 else 0.0 for t in range(length)]
        records.append(
            {
                "prompt": "a long rollout",
                "response": " ".join(tokens),
                "group": "long",
                "step": 0,
                "token_ids": [WORDS.index(t) for t in tokens],
                "tokens": tokens,
                "logprobs": [-rng.random() for _ in tokens],
                "entropies": [rng.random() * 2 for _ in tokens],
                "rewards": {"task": float(rng.random() < 0.5), "style": min(style) if style else 0.0},
                "token_rewards": {"style": style},
            }
        )
    return records


def time_navigation(page, url: str, key: str) -> float:
    start = time.perf_counter()
    page.goto(url)
    page.wait_for_function(DRAWN, arg=key, timeout=120_000, polling=20)
    return time.perf_counter() - start


def time_slider(page, key: str, slider: str) -> float:
    before = page.evaluate(Z_SUM, key)
    thumb = page.locator(f".st-key-{slider} input[type=range]")
    thumb.focus()
    start = time.perf_counter()
    thumb.press("ArrowRight")
    page.wait_for_function(
        f"(b) => {{ const s = ({Z_SUM})('{key}'); return s !== null && s !== b; }}",
        arg=before,
        timeout=120_000,
        polling=10,
    )
    page.wait_for_function(DRAWN, arg=key, timeout=120_000, polling=10)
    elapsed = time.perf_counter() - start
    wait_idle(page, 120_000)
    return elapsed


def main(argv: list[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - browser bench only

    if not Path(CHROMIUM).exists():
        print("bench app: chromium not found at /usr/bin/chromium (make browser-deps)", file=sys.stderr)
        return 2
    argv = list(argv or [])
    if argv[:1] == ["big"]:  # the views on a real-size run against the demo's (bench/app_big.py)
        from bench import app_big  # noqa: PLC0415

        return app_big.main(argv[1:])
    rounds = 3
    if len(argv) >= 2 and argv[-2] == "--rounds" and argv[-1].isdigit() and int(argv[-1]) > 0:
        rounds, argv = int(argv[-1]), argv[:-2]
    if argv not in ([], ["fresh"]):
        print(
            "usage: python -m bench app [fresh] [--rounds N] | big [--tokens N] [--rounds N]", file=sys.stderr
        )
        return 2
    with tempfile.TemporaryDirectory() as tmp, sync_playwright() as p:
        fresh, added = app_load.measure(p, Path(tmp) / "demo.duckdb", Path(tmp), rounds=rounds)
    app_load.print_table(fresh, added)
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    if argv == ["fresh"]:
        return 0
    repeats = 3
    OUT.mkdir(exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runs.duckdb"
        with Store(db) as store:
            import_bundled(store, quiet=True)
            import_records(store, "long", long_records(), content_key="long-4096")
        with Server(db, log=Path(tmp) / "streamlit.log") as srv, sync_playwright() as p:
            browser = launch(p)
            page = browser.new_page(viewport={"width": 1500, "height": 1000})

            nav = [
                time_navigation(page, f"{srv.url}/rollout?run=long&rollout=0", "rollout_heatmap")
                for _ in range(repeats)
            ]
            wait_idle(page)
            rows.append(("open 4096-token rollout → heatmap drawn (first, cold cache)", nav[0], 2.0))
            rows.append(
                (
                    "open 4096-token rollout → heatmap drawn (median of repeats)",
                    statistics.median(nav[1:]),
                    2.0,
                )
            )

            for run, label in (("oracle", "one group 8 × 48 tokens"), ("long", "one group 8 × 4096 tokens")):
                time_navigation(page, f"{srv.url}/tune?run={run}&rollout=0", "tune_heatmap")
                wait_idle(page)
                times = [time_slider(page, "tune_heatmap", "tune_beta_style") for _ in range(repeats)]
                rows.append(
                    (f"β slider → Tune heatmap redrawn ({label}, median)", statistics.median(times), 0.5)
                )

            views = [
                ("rollout", "rollout?run=demo&rollout=3"),
                ("rollout_oracle", "rollout?run=oracle&rollout=0&pos=3"),
                ("group", "group?run=demo&rollout=3"),
                ("compare", "compare?run=oracle&rollout=0"),
                ("tune", "tune?run=demo&rollout=3"),
                ("resample", "resample?run=demo&rollout=0"),
                ("oracle", "oracle?run=oracle"),
                ("runs", "runs"),
            ]
            for name, path in views:
                page.goto(f"{srv.url}/{path}")
                page.wait_for_selector("h1")
                wait_idle(page)
                if name != "runs":
                    page.wait_for_selector(".js-plotly-plot .main-svg", timeout=60_000)
                time.sleep(0.5)
                page.screenshot(path=str(OUT / f"{name}.png"), full_page=True)
            browser.close()

    print(f"{'measurement':<72} {'seconds':>8} {'target':>7} {'ratio':>6}")
    for name, seconds, target in rows:
        print(f"{name:<72} {seconds:>8.3f} {target:>7.2f} {seconds / target:>6.2f}")
    print(f"screenshots: {OUT}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
