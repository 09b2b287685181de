"""`python -m bench reliability`: a 10M-token run imported and browsed with its peak memory measured, and
(with `--loops`) the long fuzz / kill / concurrency loops of tests/reliability.

Each step runs in its own process, so `ru_maxrss` is that step's peak resident memory, not the sum of
everything this command did before it.
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

ROOT = Path(__file__).resolve().parents[1]

STEP = r"""
import json, resource, sys, time
from pathlib import Path
t0 = time.perf_counter()
step, db, arg = sys.argv[1], sys.argv[2], sys.argv[3]
base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
out = {}
if step == "write":
    from bench.ingest import write_run
    out["tokens"] = write_run(Path(arg), int(db))
else:
    from backend.store import Store
    base_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # after imports: what the step adds
    t0 = time.perf_counter()
    if step == "import":
        from backend.ingest import import_path
        with Store(db) as store:
            report = import_path(store, arg, "big")
        out["tokens"], out["records"] = report.tokens, report.records
    elif step == "index":
        with Store(db, read_only=True) as store:
            index = store.rollout_index("big")
        out["rows"] = len(index)
    elif step == "group":
        with Store(db, read_only=True) as store:
            batch = store.load_batch("big", group_ids=[int(arg)])
            rollout = store.rollout("big", int(batch.rollout_ids[0]))
        out["rows"], out["T"], out["tokens"] = batch.B, batch.T, len(rollout["token_ids"])
out["seconds"] = time.perf_counter() - t0
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["added_rss_mb"] = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - base_rss) / 1024
print(json.dumps(out))
"""


def _step(step: str, db: str, arg: str) -> dict:
    cmd = [sys.executable, "-c", STEP, step, db, arg]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"step {step} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def scale(tokens: int, keep: Path | None) -> int:
    work = Path(tempfile.mkdtemp(prefix="creditlens-rel-")) if keep is None else keep
    work.mkdir(parents=True, exist_ok=True)
    src, db = work / "big.parquet", work / "big.duckdb"
    for p in (db, Path(str(db) + ".wal")):
        p.unlink(missing_ok=True)
    rows = []
    w = _step("write", str(tokens), str(src))
    rows.append(("write 10M-token Parquet" if tokens == 10_000_000 else f"write {tokens:,}-token Parquet", w))
    rows.append(("import (native Parquet fast path)", _step("import", str(db), str(src))))
    rows.append(("rollout_index (all rollouts)", _step("index", str(db), "0")))
    rows.append(("load_batch(one group) + rollout()", _step("group", str(db), "17")))
    print(
        f"source {src.stat().st_size / 2**20:.0f} MiB, store {db.stat().st_size / 2**20:.0f} MiB, "
        f"{w['tokens']:,} tokens; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores"
    )
    print(f"{'step':<38} {'seconds':>8} {'peak RSS MiB':>13} {'added by step':>14}  result")
    for name, r in rows:
        extra = ", ".join(f"{k}={v:,}" for k, v in r.items() if k in ("tokens", "records", "rows", "T"))
        rss = f"{r['peak_rss_mb']:>13.0f} {r['added_rss_mb']:>14.0f}"
        print(f"{name:<38} {r['seconds']:>8.2f} {rss}  {extra}")
    imp = rows[1][1]
    print(
        f"import: {imp['tokens'] / imp['seconds'] / 1e6:.1f} M tokens/s; peak RSS / source size = "
        f"{imp['peak_rss_mb'] / (src.stat().st_size / 2**20):.2f}"
    )
    return 0


def loops(scale: float = 1.0) -> int:
    """The reliability suite in its long mode (more hypothesis examples, mutations and kills); `scale`
    multiplies those budgets (never below the quick mode's)."""
    env = dict(os.environ, CREDITLENS_FUZZ_LONG="1", CREDITLENS_FUZZ_SCALE=str(scale))
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as tmp:
        env["CREDITLENS_RELIABILITY_COUNTS"] = tmp.name
    start = time.perf_counter()
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "tests/reliability",
        "-q",
        "-p",
        "no:cacheprovider",
        "-o",
        "timeout=3600",
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env)
    counts = json.loads(Path(env["CREDITLENS_RELIABILITY_COUNTS"]).read_text() or "{}")
    print(f"\n{'cases tried (long mode)':<72} {'count':>7}")
    for key in sorted(counts):
        print(f"{key:<72} {counts[key]:>7}")
    took = time.perf_counter() - start
    scaled = f", budgets x{scale:g}" if scale != 1 else ""
    print(f"{'total':<72} {sum(counts.values()):>7}   ({took:.0f} s, exit {proc.returncode}{scaled})")
    if proc.returncode:
        kept = env.get("CREDITLENS_HYPOTHESIS_DB") or ROOT / ".hypothesis" / "long"
        print(
            "a hypothesis case that failed is printed above with its @reproduce_failure blob, and kept in "
            f"{kept}: the next --loops run (or "
            "HYPOTHESIS_PROFILE=long pytest tests/reliability/test_fuzz_importers.py) replays it first"
        )
    return proc.returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench reliability")
    parser.add_argument("--tokens", type=int, default=10_000_000)
    parser.add_argument("--keep", type=Path, default=None, help="work directory to keep (default: temp dir)")
    parser.add_argument("--loops", action="store_true", help="also run the long fuzz/kill/concurrency loops")
    parser.add_argument(
        "--scale", type=float, default=1.0, help="--loops: their case budgets times this (default 1: whole)"
    )
    args = parser.parse_args(argv)
    code = scale(args.tokens, args.keep)
    if args.loops:
        code = loops(args.scale) or code
    return code


if __name__ == "__main__":
    sys.exit(main())
