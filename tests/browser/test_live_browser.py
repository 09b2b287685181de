"""Live (issue 46): `creditlens watch` follows a folder that a trainer writes step files to and serves the app
on its run; the Trends page it prints, open in headless Chromium before the first step, waits for the run
and then reaches each new step without a reload; Ctrl-C stops the whole process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from bench.chromium import CHROMIUM
from tests.conftest import free_test_port, make_records

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.browser
SIDEBAR_SAYS = "(text) => document.querySelector('[data-testid=stSidebar]')?.innerText.includes(text)"
LAST_STEP_DRAWN = """(key) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  return gd && gd._fullData ? Math.max(...gd._fullData[0].x) : null;
}"""


def write_step(folder: Path, records: list[dict], step: int) -> None:
    """One step's native Parquet file, written whole under a hidden name and renamed into place, as the
    recorder writes it (backend/ingest/native_writer.py)."""
    hidden = folder / f".step_{step:06d}.parquet.tmp"
    pq.write_table(pa.Table.from_pylist([r for r in records if r["step"] == step]), hidden)
    os.replace(hidden, folder / f"step_{step:06d}.parquet")


def _served_url(log: Path, proc: subprocess.Popen, timeout: float = 120) -> str:
    """The address watch printed, once the server behind it answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        printed = [line for line in log.read_text().splitlines() if line.startswith("Credit Lens on ")]
        if printed:
            url = printed[0].removeprefix("Credit Lens on ").strip()
            try:
                with urllib.request.urlopen(urljoin(url, "/_stcore/health"), timeout=2) as answer:
                    if answer.status == 200:
                        return url
            except OSError:
                pass
        time.sleep(0.2)
    raise AssertionError(f"watch served nothing in {timeout:.0f} s:\n{log.read_text()}")


def test_watch_serves_a_page_that_follows_the_run_and_ctrl_c_stops_it(browser, bundled_db, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make browser-deps)")
    folder = tmp_path / "steps"
    folder.mkdir()
    records = make_records(n_groups=4, group_size=4, seed=3, steps=12)
    log = tmp_path / "watch.log"
    command = [sys.executable, "-m", "backend.cli", "watch", str(folder), "--run", "live"]
    command += ["--db", str(bundled_db), "--port", str(free_test_port())]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, CREDITLENS_WARMUP="0"),
            start_new_session=True,  # its own process group: the test's Ctrl-C reaches the whole tree
        )
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        url = _served_url(log, proc)
        assert url.endswith("/trends?run=live&live=1"), url
        page = context.new_page()
        page.set_default_timeout(60_000)
        page.goto(url)  # before the trainer wrote a step: the page waits for the run
        page.wait_for_function(SIDEBAR_SAYS, arg="Waiting for run live", timeout=90_000)
        page.evaluate("window.sameDocument = true")  # gone if the page were reloaded
        for step in range(6):
            write_step(folder, records, step)
        page.wait_for_function(SIDEBAR_SAYS, arg="step 5 · updated", timeout=60_000)
        assert "Trends · live" in page.locator("h1").first.inner_text()
        for step in range(6, 12):  # six more steps land while the page is open
            write_step(folder, records, step)
        page.wait_for_function(SIDEBAR_SAYS, arg="step 11 · updated", timeout=30_000)
        assert page.evaluate("window.sameDocument === true")
        page.wait_for_function(f"() => ({LAST_STEP_DRAWN})('trends_length') === 11")  # the chart has them
        assert page.locator("[data-testid=stException]").count() == 0
    finally:
        context.close()
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        try:
            proc.wait(timeout=40)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    printed = log.read_text()
    assert proc.returncode == 0, printed
    assert "stopped following" in printed and "step_000011.parquet: live: imported 16 rollouts" in printed
    with pytest.raises(ProcessLookupError):  # no child left behind: the group is empty
        os.killpg(proc.pid, 0)


def test_a_ctrl_c_sent_to_watch_alone_stops_every_process_it_started(bundled_db, tmp_path):
    """`kill -INT` of the watch process only (not its group, as a terminal's Ctrl-C would): it passes the
    signal on, its app launcher passes it to Streamlit, and nothing is left running."""
    folder = tmp_path / "steps"
    folder.mkdir()
    log = tmp_path / "watch.log"
    command = [sys.executable, "-m", "backend.cli", "watch", str(folder), "--run", "quiet"]
    command += ["--db", str(bundled_db), "--port", str(free_test_port())]
    with open(log, "w") as out:
        proc = subprocess.Popen(
            command,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, CREDITLENS_WARMUP="0"),
            start_new_session=True,
        )
    try:
        _served_url(log, proc)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        deadline = time.monotonic() + 30
        while True:  # the group empties once the children have stopped
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, "a process of watch's tree is still running"
            time.sleep(0.2)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, log.read_text()
    assert "stopped following" in log.read_text()
