"""`python -m bench heads [--seeds 5] [--prompts 500]`: token_rm's linear vs MLP head on the oracle.

The `task` setting of the oracle bench (task reward only, one estimator) on `--seeds` seeds: every
section-9 metric of token_rm with `head=linear` and `head=mlp` beside the estimators the reference
write-up compares with (broadcast grpo, entropy, high_entropy_mask), mean ± std over seeds, and the
seconds each estimator took.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from backend.estimators.registry import estimate
from backend.evaluation.metrics import average_ranks, batch_metrics
from backend.evaluation.synthetic import OracleConfig, generate, to_batch

ROWS = (
    ("grpo", {}),
    ("entropy", {}),
    ("high_entropy_mask", {}),
    ("token_rm", {"head": "linear"}),
    ("token_rm", {"head": "mlp"}),
)
SHOWN = ("key_recall", "filler_mass", "auroc", "sign_accuracy", "spearman")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench heads")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--prompts", type=int, default=500)
    args = parser.parse_args(argv)
    results: dict[str, list[dict]] = {}
    seconds: dict[str, float] = {}
    for seed in range(args.seeds):
        sample = generate(seed, OracleConfig(prompts=args.prompts, group=8))
        batch = to_batch(sample, channels=("task",))
        ranks = average_ranks(batch.extras["true_credit"][batch.response_mask])
        for name, overrides in ROWS:
            label = name + "".join(f" {k}={v}" for k, v in overrides.items())
            clock = time.perf_counter()
            adv = estimate(name, batch, **overrides).advantages
            seconds[label] = seconds.get(label, 0.0) + time.perf_counter() - clock
            results.setdefault(label, []).append(batch_metrics(adv, batch, None, ranks))
    print(f"oracle, task setting, {args.seeds} seeds x {args.prompts} prompts x 8 (mean ± std over seeds)")
    print(f"{'estimator':<22}" + "".join(f"{m:>16}" for m in SHOWN) + f"{'seconds':>9}")
    for label, rows in results.items():
        cells = ""
        for m in SHOWN:
            v = np.array([r[m] for r in rows], dtype=np.float64)
            cells += f"{f'{np.nanmean(v):.3f} ± {np.nanstd(v):.3f}':>16}"
        print(f"{label:<22}{cells}{seconds[label]:>9.1f}")
    return 0
