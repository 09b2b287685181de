"""`python -m bench model_credit [--rollouts 4] [--device cpu|cuda] [--json FILE]`.

OAR-P, OAR-G and GCPO on a few rollouts of the bundled demo run with the bundled policy: each method
batched (what `creditlens model-credit` runs) against its loop twin (one perturbation, or one token, per
model call; OAR-G's twin also runs one backward pass per token), in the same process on the same
rollouts. The table gives the seconds each way and their ratio; both ways give the same scores (the
largest |difference| is printed).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from backend.models import load_engine
from backend.models import model_credit as mc

ROOT = Path(__file__).resolve().parents[1]
MODEL = ROOT / "sample_runs" / "demo-policy"
RUN = ROOT / "sample_runs" / "demo_run.jsonl"


def _rollouts(n: int) -> list[mc.RolloutTokens]:
    records = [json.loads(line) for line in RUN.read_text().splitlines() if line.strip()]
    last = [r for r in records if r["step"] == max(x["step"] for x in records)]
    picked = [r for r in last if mc.answer_span(r["tokens"]) is not None][:n]
    return [
        mc.RolloutTokens(i, r["prompt"], r["prompt_ids"], r["token_ids"], r["tokens"])
        for i, r in enumerate(picked)
    ]


def _timed(fn):
    start = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - start


def _max_gap(a: dict, b: dict) -> float:
    gaps = [np.nanmax(np.abs(a[k] - b[k])) for k in a if np.isfinite(a[k] - b[k]).any()]
    return float(max(gaps)) if gaps else 0.0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench model_credit", description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=4)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv or [])
    engine = load_engine(MODEL, engine="transformers", device=args.device)
    rollouts = _rollouts(args.rollouts)
    mc.oar_p_scores(engine, rollouts[:1])  # warm-up
    reasoning = sum(mc.answer_span(r.tokens)[0] for r in rollouts)
    tokens = sum(len(r.token_ids) for r in rollouts)
    methods = {
        # name: (batched, loop, model sequences each way)
        "oar_p": (
            lambda: mc.oar_p_scores(engine, rollouts),
            lambda: {r.rollout_id: mc.oar_p_scores_loop(engine, r) for r in rollouts},
            reasoning + len(rollouts),
        ),
        "oar_g": (
            lambda: mc.oar_g_scores(engine, rollouts),
            lambda: {r.rollout_id: mc.oar_g_scores_loop(engine, r) for r in rollouts},
            reasoning,
        ),
        "gcpo": (
            lambda: mc.gcpo_deltas(engine, rollouts),
            lambda: {r.rollout_id: mc.gcpo_deltas_loop(engine, r) for r in rollouts},
            2 * tokens,
        ),
    }
    rows = []
    print(f"{len(rollouts)} rollouts, {tokens} tokens ({reasoning} reasoning) on {engine.device}")
    print(f"{'method':<8} {'sequences':>9} {'batched s':>10} {'loop s':>8} {'ratio':>7} {'max |diff|':>11}")
    for name, (batched, loop, sequences) in methods.items():
        fast, fast_s = _timed(batched)
        slow, slow_s = _timed(loop)
        row = {
            "method": name,
            "sequences": sequences,
            "batched_s": round(fast_s, 3),
            "loop_s": round(slow_s, 3),
            "ratio": round(slow_s / fast_s, 1),
            "max_abs_diff": _max_gap(fast, slow),
        }
        rows.append(row)
        print(
            f"{name:<8} {sequences:>9} {fast_s:>10.2f} {slow_s:>8.2f} {row['ratio']:>6.1f}x "
            f"{row['max_abs_diff']:>11.2e}"
        )
    if args.json:
        args.json.write_text(json.dumps({"device": engine.device, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
