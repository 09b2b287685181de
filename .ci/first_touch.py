"""First contact, as a new user has it: `make app` on a machine that has never run it.

Run by `.ci/run` before the tests. Starts `make app` with HOME set to a new empty folder (no
~/.creditlens, no caches), waits for the server's health endpoint (the install runs first when the
checkout has no venv), opens the landing page in headless Chromium, checks that the Explorer of the
bundled demo run is drawn with no exception on the page, saves a screenshot, and stops the server.
Exit code 0 when all of that happened, 1 otherwise (the server's log is printed).

    python3 .ci/first_touch.py [--port 8765] [--timeout 1800] [--screenshot FILE]
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as resp:
            return resp.status == 200 and resp.read().strip() == b"ok"
    except OSError:
        return False


def open_landing_page(url: str, screenshot: Path) -> str:
    """The landing page's text, read once Streamlit has finished its first run; raises on a failure."""
    # The venv's Python has Playwright (requirements-dev.txt); this script runs with the system Python.
    code = f"""
import sys
from playwright.sync_api import sync_playwright
from bench.chromium import launch, wait_idle
with sync_playwright() as p:
    browser = launch(p)
    page = browser.new_page(viewport={{"width": 1400, "height": 1000}})
    page.goto({url!r}, timeout=120_000)
    # the landing page is the Explorer of the bundled demo run: its title, then its table, then no run going
    page.wait_for_selector("h1:has-text('Explorer')", timeout=180_000)
    page.wait_for_selector("[data-testid=stDataFrame]", timeout=120_000)
    wait_idle(page, timeout=120_000)
    page.screenshot(path={str(screenshot)!r}, full_page=True)
    if page.query_selector("[data-testid=stException]"):
        sys.exit("the landing page shows an exception: " + page.inner_text("[data-testid=stException]"))
    print(page.inner_text("[data-testid=stMain]"))
    browser.close()
"""
    out = subprocess.run(
        [str(REPO / ".venv/bin/python"), "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300
    )
    if out.returncode:
        raise RuntimeError(out.stderr.strip() or out.stdout.strip())
    return out.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--port", type=int, default=8765)
    ap.add_argument("--timeout", type=float, default=1800, help="seconds for the install and the start")
    ap.add_argument("--screenshot", type=Path, default=Path(tempfile.gettempdir()) / "first_touch.png")
    args = ap.parse_args()

    home = Path(tempfile.mkdtemp(prefix="creditlens-fresh-home-"))
    log = home.parent / f"{home.name}.log"
    url = f"http://127.0.0.1:{args.port}"
    env = {k: v for k, v in os.environ.items() if k not in ("DB", "CREDITLENS_DB", "XDG_CACHE_HOME")}
    env.update(HOME=str(home), PORT=str(args.port))
    print(f"first touch: make app with HOME={home} (empty), port {args.port}", flush=True)
    with open(log, "w") as out:
        # its own process group, so that stopping it stops make, creditlens and streamlit together
        proc = subprocess.Popen(
            ["make", "app"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    ok = False
    try:
        deadline = time.monotonic() + args.timeout
        while not healthy(url):
            if proc.poll() is not None:
                raise RuntimeError(f"`make app` exited with code {proc.returncode} before serving")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no answer from {url}/_stcore/health after {args.timeout:.0f} s")
            time.sleep(1)
        store = home / ".creditlens" / "runs.duckdb"
        if not store.is_file():
            raise RuntimeError(f"the server is up but the default store {store} was not created")
        text = open_landing_page(url, args.screenshot)
        if "Explorer · demo" not in text:
            raise RuntimeError("the landing page does not show the bundled demo run:\n" + text[:2000])
        print(f"first touch: served {url}, store {store}, landing page drawn ({args.screenshot})")
        ok = True
    except RuntimeError as exc:
        print(f"first touch FAILED: {exc}", file=sys.stderr)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if not ok:
            print(log.read_text()[-6000:], file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
