"""`python -m bench app big [--tokens N] [--rounds N]`: the app's views on a real-size run against the same
views on the demo run, served by one server from one store, in headless Chromium (issue 58, item 5).

The store holds the bundled runs and a synthetic native run of `--tokens` tokens (default 100M: groups of
8, 512 rollouts a step, ragged lengths around 512 tokens, token text, logprobs, entropies, values and two
reward channels; `bench.scale.write_run`), imported by `creditlens import` in a process of its own, as a
user would. Each view is opened as a link in a new browser context (`bench.app_load.fresh_load`: no HTTP
cache, no Streamlit session) on the demo run and on the big run, interleaved so both see the same machine
load; the first visit of each (its caches cold) is reported apart from the medians of the rounds after it. A
third run, one step of the big run's shape (512 rollouts of ~512 tokens), tells what the run's size adds from
what the rollouts' length adds (the demo's responses are ~30 tokens).
Target: each view's median on the big run within 1.5x of the same view's on the demo run.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
from pathlib import Path

from app.server.launch import Server, prepare_store
from bench.app_load import fresh_load
from bench.children import run_child
from bench.chromium import launch
from bench.scale import write_run

TARGET = 1.5
# (view, its link on a run: the rollout a rollout view opens is the middle one of the run's)
VIEWS = (
    ("Explorer", "explorer?run={run}"),
    ("Trends", "trends?run={run}"),
    ("Rollout", "rollout?run={run}&rollout={rollout}"),
    ("Group", "group?run={run}&rollout={rollout}"),
)


def main(argv: list[str]) -> int:
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - browser bench only

    parser = argparse.ArgumentParser(prog="python -m bench app big")
    parser.add_argument("--tokens", type=int, default=100_000_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        db = tmp / "runs.duckdb"
        prepare_store(db)  # the bundled runs, as `creditlens app` imports them
        source = tmp / "big.parquet"
        tokens = write_run(source, None, args.tokens, text=True)
        wall, inner, cpu, rss = run_child(["import", str(source), "--db", str(db), "--run", "big", "--quiet"])
        source.unlink()
        # the same generator, one step: the views' cost of the rollouts' shape (512-token responses where
        # the demo's have ~30), apart from the run's size
        write_run(source, None, 512 * 512, seed=1, text=True)
        run_child(["import", str(source), "--db", str(db), "--run", "step", "--quiet"])
        source.unlink()
        rollouts = _rollouts(db, "big")
        print(
            f"store: the bundled runs and run 'big' of {tokens:,} tokens in {rollouts:,} rollouts "
            f"(imported in {inner:.1f} s, {cpu:.1f} CPU s, peak {rss:,.0f} MB); "
            f"{db.stat().st_size / 2**20:,.0f} MB on disk"
        )
        links = {
            "demo": {"run": "demo", "rollout": 3},
            "step": {"run": "step", "rollout": _rollouts(db, "step") // 2},
            "big": {"run": "big", "rollout": rollouts // 2},
        }
        times: dict[tuple[str, str], list[float]] = {}
        with Server(db, log=tmp / "app.log") as server, sync_playwright() as p:
            browser = launch(p)
            for round_ in range(args.rounds + 1):  # round 0: the first visits
                for view, link in VIEWS:
                    for run, fields in links.items():
                        url = f"{server.url}/{link.format(**fields)}"
                        loaded = fresh_load(browser, url, timeout=600)[1]
                        times.setdefault((view, run), []).append(loaded)
                        if round_ == 0:
                            print(f"  first visit of {view} on {run}: {loaded:.2f} s", flush=True)
            browser.close()
    print(
        f"\n{'view':<10} {'first visit: demo':>17} {'step':>6} {'big':>6}   {'median: demo':>12} {'step':>6} "
        f"{'big':>6}   {'big/demo':>8} {'big/step':>8} {'target':>6}"
    )
    met = True
    for view, _ in VIEWS:
        first = [times[(view, run)][0] for run in links]
        median = [statistics.median(times[(view, run)][1:]) for run in links]
        met &= median[2] / median[0] <= TARGET
        print(
            f"{view:<10} {first[0]:>17.2f} {first[1]:>6.2f} {first[2]:>6.2f}   {median[0]:>12.2f} "
            f"{median[1]:>6.2f} {median[2]:>6.2f}   {median[2] / median[0]:>8.2f} "
            f"{median[2] / median[1]:>8.2f} {TARGET:>6.1f}"
        )
    print(
        "seconds of a fresh page load (a link opened in a new browser context) until the view is drawn; "
        f"medians of {args.rounds} rounds after the first visit.\n"
        "demo: the bundled demo run; step: one step (512 rollouts) of the big run's shape; big: the run of "
        "--tokens.\nbig/demo: the issue's target (≤ 1.5); big/step: what the run's size alone adds "
        "(the rollouts drawn are of the same shape)"
    )
    print(f"load average: {' '.join(f'{x:.2f}' for x in os.getloadavg())} ({os.cpu_count()} CPUs)")
    return 0 if met else 1


def _rollouts(db: Path, run: str) -> int:
    from backend.store import Store  # noqa: PLC0415

    with Store(db, read_only=True) as store:
        return int(store.next_rollout_id(store.run_id(run)))
