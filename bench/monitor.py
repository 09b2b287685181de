"""`python -m bench monitor [--tokens N] [--db PATH]`: the credit-health monitors on the explorer bench's
large synthetic run (bench/explorer.py's `write_run`: 10M tokens by default, ~1024 tokens per response,
groups of 8, 64 groups per step).

Builds (or reuses) the store and computes `grpo` once (as the Explorer would), then, in a fresh process,
times the first `backend.monitor.monitors.run_monitors` call (it computes channel_takeover's per-rollout
summary from the tokens and stores it) and then the calls that read stored summaries only, the median of 3
after one warm-up: every detector; every detector but `channel_takeover`; `channel_takeover` alone; and the
in-memory reference of channel_takeover's shares (what every call cost before the summary was stored).
Prints the load average beside the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from backend.credit import estimates, main_channel
from backend.ingest import import_path
from backend.monitor import channels as monitor_channels
from backend.monitor import config as monitor_config
from backend.monitor import monitors as monitor
from backend.store import Store, StoreHandle
from bench.explorer import peak_mb, timed, write_run


def _only(names: tuple[str, ...]) -> monitor_config.MonitorSettings:
    off = {n: {"enabled": False} for n in monitor_config.NAMES if n not in names}
    return monitor_config.parse_settings({"detectors": off})


def phase_monitor(db: str) -> dict:
    handle = StoreHandle(db)
    every = monitor_config.MonitorSettings()
    summaries = _only(tuple(n for n in monitor_config.NAMES if n != "channel_takeover"))
    takeover = _only(("channel_takeover",))
    cases = {
        "every detector": every,
        "every detector but channel_takeover": summaries,
        "channel_takeover alone (its stored summary)": takeover,
    }
    start = time.perf_counter()  # the first call after the estimate: fills the channel summary
    steps = len(monitor.run_monitors(handle, "big", settings=every).series)
    first = time.perf_counter() - start
    times = {
        name: timed(lambda s=s: monitor.run_monitors(handle, "big", settings=s)) for name, s in cases.items()
    }
    channel = main_channel.main_channel(handle, "big")
    config = main_channel.on_channel("grpo", (), channel)
    groups = int(every.option("channel_takeover", "groups_per_step"))
    reference = "channel_takeover's shares from the tokens (the in-memory reference, 1 warm call)"
    times[reference] = timed(
        lambda: monitor_channels.channel_step_shares(handle, "big", "grpo", config, channel, groups),
        repeats=1,
    )
    return {"times": times, "first": first, "steps": steps, "peak_mb": peak_mb()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench monitor")
    parser.add_argument("--tokens", type=int, default=10_000_000)
    parser.add_argument("--db", default=None, help="reuse (or build) this store instead of a temporary one")
    parser.add_argument("--phase", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.phase:
        print(json.dumps(phase_monitor(args.db)))
        return 0
    tmp = tempfile.TemporaryDirectory(prefix="bench-monitor-")
    db = args.db or os.path.join(tmp.name, "runs.duckdb")
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    with Store(db) as store:
        fresh = not store.has_run("big")
    if fresh:
        source = Path(tmp.name) / "big.parquet"
        tokens = write_run(source, args.tokens)
        start = time.perf_counter()
        with Store(db) as store:
            report = import_path(store, source, "big")
        estimates.estimate_rollouts(StoreHandle(db), "big", "grpo")
        print(
            f"built {tokens:,} tokens, {report.records:,} rollouts, grpo saved: "
            f"{time.perf_counter() - start:.1f} s"
        )
    done = subprocess.run(
        [sys.executable, "-m", "bench.monitor", "--phase", "--db", db],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    if done.returncode != 0:
        print(done.stderr[-2000:], file=sys.stderr)
        return 1
    result = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"\nmonitors over {result['steps']} steps; median of 3 warm calls, a fresh connection each")
    print(f"{'measurement':<84} {'seconds':>8}")
    print(
        f"{'first call after the estimate (every detector; fills the channel summary)':<84} "
        f"{result['first']:>8.3f}"
    )
    for name, seconds in result["times"].items():
        print(f"{name:<84} {seconds:>8.3f}")
    print(
        f"peak memory of the monitor process {result['peak_mb']:,.0f} MB; "
        f"load average now {os.getloadavg()[0]:.1f}"
    )
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
