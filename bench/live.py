"""`python -m bench live [--tokens N] [--steps K]`: a run that grows, two measurements in one run.

1. **The cost of a new step against the whole run.** A run of N tokens (default 2M, `bench.ingest.write_run`
   with 256-token responses: 512 rollouts a step) imported without its last step, its Trends numbers
   computed (grpo on the main channel, A_final's class shares, the credit-health monitors: what the Live page
   redraws); then the last step appended and the same numbers again, which compute only that step's rollouts.
   Beside it, the same numbers on the whole run imported at once into a fresh store (everything computed)
   and, as the floor, the same numbers again with nothing new (every summary stored).
2. **Latency from a step file landing to its point drawn.** `creditlens watch` on a folder of native step
   files (256 rollouts of about 256 tokens a step, groups of 4), the printed Trends address open in headless
   Chromium; each of K new step files is written (atomically, as the recorder writes it) and timed until the
   length chart's last point is that step. Target: 5 s.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from urllib.parse import urljoin

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from backend.ingest import import_path
from backend.monitor import monitors
from backend.store import Store, StoreHandle
from backend.views import explorer
from bench.chromium import launch
from bench.ingest import write_run

ROOT = Path(__file__).resolve().parents[1]
CONFIG = (("channel", "task"),)
SIDEBAR_SAYS = "(text) => document.querySelector('[data-testid=stSidebar]')?.innerText.includes(text)"
"""A page function: whether the sidebar's text holds `text` (the Live line)."""
LAST_STEP_DRAWN = """(key) => {
  const gd = document.querySelector(`.st-key-${key} .js-plotly-plot`);
  return gd && gd._fullData && gd._fullData.length ? Math.max(...gd._fullData[0].x) : -1;
}"""


def _trends_work(handle: StoreHandle, run: str) -> float:
    """Seconds of what the Live Trends page recomputes: the trends (grpo, A_final shares) and the monitors,
    the reads sharing one connection as in the app's script run (`StoreHandle.kept_open`)."""
    start = time.perf_counter()
    with handle.kept_open():
        explorer.step_trends(handle, run, "grpo", CONFIG)
        monitors.run_monitors(handle, run, "grpo", CONFIG)
    return time.perf_counter() - start


def _split(source: Path, tmp: Path) -> tuple[Path, Path, int, int]:
    """The run without its last step, and its last step, as two Parquet files; (.., last step, its tokens)."""
    table = pq.read_table(source)
    last = pc.max(table["step"]).as_py()
    head, tail = tmp / "head.parquet", tmp / "tail.parquet"
    pq.write_table(table.filter(pc.less(table["step"], last)), head)
    tail_table = table.filter(pc.equal(table["step"], last))
    pq.write_table(tail_table, tail)
    return head, tail, last, int(pc.sum(pc.list_value_length(tail_table["token_ids"])).as_py())


def step_cost(tmp: Path, tokens: int) -> list[tuple[str, float]]:
    source = tmp / "run.parquet"
    total = write_run(source, tokens, mean_len=256)
    head, tail, last, step_tokens = _split(source, tmp)
    warm = tmp / "warm.parquet"  # the first computation of a process pays its imports: not timed
    write_run(warm, 20_000, seed=9, mean_len=256)
    with Store(tmp / "warm.duckdb") as store:
        import_path(store, warm, "w")
    _trends_work(StoreHandle(tmp / "warm.duckdb"), "w")
    grown, whole = tmp / "grown.duckdb", tmp / "whole.duckdb"
    with Store(grown) as store:
        import_path(store, head, "r")
    handle = StoreHandle(grown)
    before = _trends_work(handle, "r")
    start = time.perf_counter()
    with Store(grown) as store:
        import_path(store, tail, "r", append=True)
    imported = time.perf_counter() - start
    new_step = _trends_work(handle, "r")
    floor = _trends_work(handle, "r")
    with Store(whole) as store:
        import_path(store, source, "r")
    everything = _trends_work(StoreHandle(whole), "r")
    print(
        f"a run of {total:,} tokens in {last + 1} steps; its last step {step_tokens:,} tokens; "
        f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    )
    return [
        (f"whole run, computed at once ({last + 1} steps)", everything),
        (f"first {last} steps (the run before it grew)", before),
        ("import of the new step (append)", imported),
        ("the new step (incremental)", new_step),
        ("again, nothing new (the floor)", floor),
    ]


def start_watch(
    folder: Path, db: Path, run: str, log: Path, port: int, *args: str, **popen
) -> subprocess.Popen:
    """`creditlens watch FOLDER --run RUN --db DB --port PORT ARGS` in the background, its output in `log`,
    without the app's warm-up (`popen`: more `subprocess.Popen` arguments, e.g. its own process group)."""
    command = [sys.executable, "-m", "backend.cli", "watch", str(folder), "--run", run, "--db", str(db)]
    with open(log, "w") as out:
        return subprocess.Popen(
            [*command, "--port", str(port), *args],
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "CREDITLENS_WARMUP": "0", **popen.pop("env", {})},
            **popen,
        )


def served_url(log: Path, proc: subprocess.Popen, timeout: float = 180) -> str:
    """The address `creditlens watch` printed, once its server answers."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"watch ended (exit {proc.returncode}):\n{log.read_text()[-3000:]}")
        printed = [line for line in log.read_text().splitlines() if line.startswith("Credit Lens on ")]
        if printed:
            url = printed[0].removeprefix("Credit Lens on ").strip()
            try:
                with urllib.request.urlopen(urljoin(url, "/_stcore/health"), timeout=2):
                    return url
            except OSError:
                pass
        time.sleep(0.2)
    raise RuntimeError(f"watch served nothing in {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def write_step(table: pa.Table, folder: Path, step: int) -> None:
    """One step's native Parquet file, written whole under a hidden name and renamed into place, as the
    recorder writes it (backend/ingest/native_writer.py)."""
    hidden = folder / f".step_{step:06d}.parquet.tmp"
    pq.write_table(table.filter(pc.equal(table["step"], step)), hidden)
    os.replace(hidden, folder / f"step_{step:06d}.parquet")


def latency(tmp: Path, steps: int, first: int = 4) -> list[float]:
    """Seconds from each new step file's rename to its point on the open page's length chart."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - browser only

    source = tmp / "small.parquet"
    write_run(source, (first + steps) * 256 * 256, seed=3, mean_len=256, group=4)  # 256 rollouts a step
    table = pq.read_table(source)
    folder = tmp / "steps"
    folder.mkdir()
    for step in range(first):
        write_step(table, folder, step)
    log = tmp / "watch.log"
    proc = start_watch(folder, tmp / "watch.duckdb", "live", log, 8765, start_new_session=True)
    times = []
    try:
        url = served_url(log, proc)
        with sync_playwright() as p:
            browser = launch(p)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.goto(f"{url}&tab=behaviour")  # the length chart's tab (Trends draws the open tab alone)
            drawn = f"(step) => ({LAST_STEP_DRAWN})('trends_length') >= step"
            page.wait_for_function(drawn, arg=first - 1, timeout=300_000, polling=50)
            for step in range(first, first + steps):
                page.wait_for_timeout(3000)  # the page idle between steps, as beside a trainer
                start = time.perf_counter()
                write_step(table, folder, step)
                page.wait_for_function(drawn, arg=step, timeout=120_000, polling=50)
                times.append(time.perf_counter() - start)
            browser.close()
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench live")
    parser.add_argument(
        "--tokens", type=int, default=2_000_000, help="tokens of the run that grows by a step"
    )
    parser.add_argument("--steps", type=int, default=5, help="step files timed from landing to drawn")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        rows = step_cost(tmp, args.tokens)
        whole = rows[0][1]
        print(f"\n{'Trends numbers (trends + monitors)':<48} {'s':>7} {'/ whole':>8}")
        for name, seconds in rows:
            print(f"{name:<48} {seconds:7.2f} {seconds / whole:8.2f}")
        times = latency(tmp, args.steps)
        print(f"\nstep file landing -> its point drawn ({len(times)} steps, creditlens watch + Chromium)")
        print("  " + ", ".join(f"{t:.2f}" for t in times) + " s")
        print(f"  median {statistics.median(times):.2f} s, max {max(times):.2f} s; target 5 s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
