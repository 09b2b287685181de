"""`python -m bench teacher [--rollouts 24] [--samples 16] [--workers 2]`: the teacher job's throughput.

The same job (the first N rollouts of the demo run picked evenly, step-end positions, M samples, seed
0) runs three ways, each on a fresh store: in this process (the baseline), on a local Ray cluster with
one worker and with `--workers` workers (one engine per worker, one CPU each). Rows: seconds of the
job (Ray: from submitting to the last write, actor start included), rollouts/s, suffix tokens/s, per
worker, and the speed-up against the single process. All three must store the same values (checked).
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

from backend.ingest import import_path
from backend.models.teacher import TeacherSettings, run_teacher
from backend.store import Store, StoreHandle

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "sample_runs" / "demo-policy"
RUN = ROOT / "sample_runs" / "demo_run.jsonl"


def fresh_store(folder: Path, name: str) -> Path:
    db = folder / f"{name}.duckdb"
    with Store(db) as store:
        import_path(store, RUN, "demo", model_dir=str(MODEL), verifier="answer_match")
    return db


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench teacher")
    parser.add_argument("--rollouts", type=int, default=24)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    settings = TeacherSettings(
        model_dir=str(MODEL), samples=args.samples, engine="transformers", device="cpu"
    )
    rows, values = [], []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        plans = [
            ("single process (baseline)", None, 1),
            ("ray, 1 worker", "local:1", 1),
            (f"ray, {args.workers} workers", f"local:{args.workers}", args.workers),
        ]
        for label, address, workers in plans:
            db = fresh_store(folder, label.split()[0] + str(workers))
            report = run_teacher(
                StoreHandle(db),
                "demo",
                settings,
                rollouts=args.rollouts,
                seed=0,
                ray_address=address,
                workers=workers if address else None,
            )
            if address is not None:
                import ray  # noqa: PLC0415 - optional: Ray

                ray.shutdown()
            with Store(db, read_only=True) as store:
                values.append(store.resample_values("demo"))
            rows.append((label, workers, report))
    base = rows[0][2].seconds
    load = os.getloadavg()[0]
    print(
        f"teacher job: {args.rollouts} rollouts, M = {args.samples}, step-end positions "
        f"({rows[0][2].positions} positions, {rows[0][2].suffixes} suffixes); load average {load:.1f}, "
        f"{os.cpu_count()} CPUs"
    )
    print(
        f"{'how':<28}{'workers':>8}{'seconds':>9}{'rollouts/s':>12}{'tokens/s':>10}"
        f"{'tokens/s/worker':>17}{'speed-up':>10}"
    )
    for label, workers, r in rows:
        print(
            f"{label:<28}{workers:>8}{r.seconds:>9.1f}{r.valued / r.seconds:>12.2f}"
            f"{r.tokens / r.seconds:>10.0f}{r.tokens / r.seconds / workers:>17.0f}"
            f"{base / r.seconds:>9.2f}x"
        )
    same = all(v.equals(values[0]) for v in values[1:])
    print(f"same values in all three: {same}")
    return 0 if same else 1
