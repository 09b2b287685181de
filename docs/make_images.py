"""The README's pictures: each view of the app on the bundled runs, taken by driving the real app
(`streamlit run` on a fresh store) in headless Debian chromium, so they can be remade after a change.

    python docs/make_images.py                 # writes docs/images/*.png (small: 1000 px wide, 256 colours)
    python docs/make_images.py --out /tmp/shots --all   # every view, also on subword and simple-token runs

The store holds the bundled runs (`creditlens init`) plus two runs with word-sized tokens: `subword` (the
demo responses re-tokenized with a byte-level BPE trained in-repo, `backend.demo.subword`) and `simple`
(the same responses imported without token ids, so the importer's simple tokenization cuts them).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from urllib.parse import quote

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from app.server.launch import Server  # noqa: E402
from backend.demo.bundled import import_bundled  # noqa: E402
from backend.demo.subword import subword_records  # noqa: E402
from backend.ingest import import_records  # noqa: E402
from backend.store import Store  # noqa: E402
from bench.chromium import launch, wait_idle  # noqa: E402

# (file name, path and query, what to wait for, keys of elements to scroll into view first)
README_VIEWS = (
    ("rollout", "rollout?run=demo&rollout=3&pos=13", ".st-key-rollout_text .tok"),
    ("rollout-subword", "rollout?run=subword&rollout=9&pos=4", ".st-key-rollout_heatmap .js-plotly-plot"),
    ("group", "group?run=oracle&rollout=0", ".st-key-group_heatmap .js-plotly-plot"),
    ("compare", "compare?run=oracle&rollout=0", ".st-key-compare_multiples .js-plotly-plot"),
    (
        "tune",
        "tune?run=oracle&rollout=0&beta_style=2.0&base=difference",
        ".st-key-tune_heatmap .js-plotly-plot",
    ),
    ("resample", "resample?run=demo&rollout=1", ".st-key-resample_heatmap .js-plotly-plot"),
    ("oracle", "oracle?run=oracle", ".js-plotly-plot"),
    ("runs", "runs", "[data-testid=stDataFrame]"),
    (
        "runs-side-by-side",
        "trends?run=kl-0.0&runs=kl-0.0,kl-0.2&smooth=0",
        ".st-key-trends_runs_kl .js-plotly-plot",
    ),
)
MORE_VIEWS = tuple(
    (f"{view}-{run}-{rollout}", f"{path}?run={run}&rollout={rollout}", ".js-plotly-plot")
    for run, rollout in (("subword", 0), ("subword", 9), ("simple", 2))
    for view, path in (
        ("rollout", "rollout"),
        ("group", "group"),
        ("compare", "compare"),
        ("tune", "tune"),
        ("resample", "resample"),
    )
) + (
    (
        "tune-summed",
        "tune?run=demo&rollout=3&beta_style=2.0&base=side+by+side&against=summed",
        ".st-key-tune_baseline_heatmap .js-plotly-plot",
    ),
    (
        "compare-classes",
        "compare?run=demo&rollout=3&tab=agreement&classes="  # the class-mass chart's tab
        + quote(json.dumps([["carry word", "phrases", "carry"], ["digits", "regex", r"^\d$"]])),
        ".st-key-compare_mass .js-plotly-plot",
    ),
)


def build_store(db: Path) -> None:
    with Store(db) as store:
        import_bundled(store, quiet=True)
        import_records(store, "subword", subword_records(groups=4, long_response=700), content_key="subword")
        simple = [
            {k: v for k, v in r.items() if k not in ("token_ids", "tokens")}
            for r in subword_records(groups=2)
        ]
        import_records(store, "simple", simple, content_key="simple-tokens")


def shrink(path: Path, width: int, colours: int) -> None:
    """Resize to `width` px and reduce to a palette of `colours` (README pictures stay small)."""
    from PIL import Image  # noqa: PLC0415 - only for the pictures

    with Image.open(path) as img:
        img = img.convert("RGB")
        if img.width > width:
            img = img.resize((width, round(img.height * width / img.width)), Image.LANCZOS)
        img.quantize(colors=colours, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    parser.add_argument("--all", action="store_true", help="also every view on the subword and simple runs")
    parser.add_argument("--width", type=int, default=1000)
    parser.add_argument("--colours", type=int, default=256)
    parser.add_argument("--height", type=int, default=1100, help="viewport height (the picture's)")
    parser.add_argument("--only", default="", help="comma-separated picture names to make (default: all)")
    args = parser.parse_args(argv)
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - browser only

    args.out.mkdir(parents=True, exist_ok=True)
    views = README_VIEWS + (MORE_VIEWS if args.all else ())
    if args.only:
        views = tuple(v for v in views if v[0] in args.only.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "runs.duckdb"
        build_store(db)
        with Server(db, log=Path(tmp) / "streamlit.log") as server, sync_playwright() as p:
            browser = launch(p)
            context = browser.new_context(viewport={"width": 1400, "height": args.height})
            page = context.new_page()
            page.set_default_timeout(180_000)  # a loaded machine and a cold server
            for name, path, ready in views:
                page.goto(f"{server.url}/{path}")
                wait_idle(page, timeout=180_000)
                try:
                    page.wait_for_selector(ready, state="attached")
                except Exception:  # noqa: BLE001 - keep what the page shows, say what was missing
                    print(f"{name}: {ready} did not appear", file=sys.stderr)
                wait_idle(page, timeout=180_000)
                page.wait_for_timeout(800)  # plotly's last relayout
                target = args.out / f"{name}.png"
                page.screenshot(path=str(target))
                if not args.all:
                    shrink(target, args.width, args.colours)
                print(f"{target} ({target.stat().st_size // 1024} KiB)")
            browser.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
