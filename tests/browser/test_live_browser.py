"""Live (issue 46): `creditlens watch` follows a folder that a trainer writes step files to and serves the app
on its run; the Trends page it prints, open in headless Chromium before the first step, waits for the run
and then reaches each new step without a reload; Ctrl-C stops the whole process tree."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import pyarrow as pa
import pytest

from bench.chromium import CHROMIUM
from bench.live import LAST_STEP_DRAWN, SIDEBAR_SAYS, served_url, start_watch, write_step
from tests.conftest import free_test_port, make_records, write_jsonl

pytestmark = pytest.mark.browser


def test_watch_serves_a_page_that_follows_the_run_and_ctrl_c_stops_it(browser, bundled_db, tmp_path):
    if not os.path.exists(CHROMIUM):
        pytest.skip("chromium is not installed (make browser-deps)")
    folder = tmp_path / "steps"
    folder.mkdir()
    records = pa.Table.from_pylist(make_records(n_groups=4, group_size=4, seed=3, steps=12))
    log = tmp_path / "watch.log"
    # its own process group: the test's Ctrl-C reaches the whole tree, as a terminal's does
    proc = start_watch(folder, bundled_db, "live", log, free_test_port(), start_new_session=True)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        url = served_url(log, proc)
        assert url.endswith("/trends?run=live&live=1"), url
        page = context.new_page()
        page.set_default_timeout(60_000)
        # before the trainer wrote a step: the page waits for the run; the link opens the length chart's tab
        page.goto(f"{url}&tab=behaviour")
        page.wait_for_function(SIDEBAR_SAYS, arg="Waiting for run live", timeout=90_000)
        page.evaluate("window.sameDocument = true")  # gone if the page were reloaded
        for step in range(6):
            write_step(records, folder, step)
        page.wait_for_function(SIDEBAR_SAYS, arg="step 5 · updated", timeout=60_000)
        assert "Trends · live" in page.locator("h1").first.inner_text()
        for step in range(6, 12):  # six more steps land while the page is open
            write_step(records, folder, step)
        page.wait_for_function(SIDEBAR_SAYS, arg="step 11 · updated", timeout=60_000)
        assert page.evaluate("window.sameDocument === true")
        page.wait_for_function(f"() => ({LAST_STEP_DRAWN})('trends_length') === 11")  # the chart has them
        errors = page.locator("[data-testid=stException]")
        assert errors.count() == 0, errors.all_inner_texts()
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
    proc = start_watch(folder, bundled_db, "quiet", log, free_test_port(), start_new_session=True)
    try:
        served_url(log, proc)
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


def test_watch_on_a_new_store_imports_the_bundled_runs_before_the_follower_starts(tmp_path):
    """The bundled runs are imported before the follower and the server start. The server used to import
    them itself, holding the write lock for tens of seconds on a loaded machine, and the follower, started
    beside it, gave up on the lock (CI: "the store is open for writing in another process")."""
    folder = tmp_path / "steps"
    folder.mkdir()
    log = tmp_path / "watch.log"
    proc = start_watch(folder, tmp_path / "new.duckdb", "live", log, free_test_port(), start_new_session=True)
    try:
        served_url(log, proc)
        deadline = time.monotonic() + 60
        while "following " not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    lines = log.read_text().splitlines()
    # printed by watch itself, before either child had started; the server found nothing left to import
    assert lines[0].startswith("imported bundled runs: ") and "demo" in lines[0], lines
    assert sum(line.startswith("imported bundled runs") for line in lines) == 1, lines
    assert proc.returncode == 0, lines


def test_watch_started_before_its_folder_waits_for_it_and_follows_native_jsonl_steps(bundled_db, tmp_path):
    """`watch` before the trainer: it used to refuse a folder not there yet, and on a folder of native JSONL
    step files it imported nothing and said nothing. It says it waits, then imports each step file."""
    folder = tmp_path / "later" / "steps"
    records = make_records(n_groups=2, group_size=3, seed=3, steps=2)
    log = tmp_path / "watch.log"
    proc = start_watch(folder, bundled_db, "jsonl", log, free_test_port(), start_new_session=True)
    try:
        served_url(log, proc)
        deadline = time.monotonic() + 60
        while "waiting for " not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        folder.mkdir(parents=True)
        for step in range(2):
            write_jsonl(folder / f"step_{step:04d}.jsonl", [r for r in records if r["step"] == step])
        while "step_0001.jsonl: jsonl: imported 6 rollouts" not in log.read_text():
            assert proc.poll() is None and time.monotonic() < deadline + 60, log.read_text()
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    printed = log.read_text()
    assert f"waiting for {folder} to appear" in printed, printed
    assert "step_0000.jsonl: jsonl: imported 6 rollouts" in printed, printed
    assert proc.returncode == 0, printed
