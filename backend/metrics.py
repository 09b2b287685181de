"""Credit-quality metrics (ESTIMATORS.md section 9) and the oracle benchmark.

Every metric compares advantages `A: (B, T)` with the oracle fields a synthetic run carries
(`key_mask`, `style_mask`, `true_credit`; see `backend.synthetic`). Conventions:
- per-response metrics (key_recall, key_precision, style_recall) average over responses whose
  advantages are not all zero (a zero-variance group carries no credit to judge);
- pooled metrics (auroc, filler_mass, sign_accuracy, spearman) use every real token of the seed;
- top-k ties are resolved by expectation: tokens tied at the k-th largest |A| share the remaining
  slots evenly, so broadcast (all |A| equal) scores the random-guess value k/L, not an artefact of
  the sort order.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np
import torch

METRICS = ("key_recall", "key_precision", "auroc", "filler_mass", "style_recall", "sign_accuracy", "spearman")


def topk_hits(scores: torch.Tensor, target: torch.Tensor, response_mask: torch.Tensor,
              k: torch.Tensor) -> torch.Tensor:
    """Expected number of `target` tokens among each row's top-k tokens by `scores`.

    scores: (B, T) float, compared as given (pass |A|)
    target, response_mask: (B, T) bool
    k: (B,) int64, clamped to [0, L_i]
    returns: (B,) float64 (0 where k = 0)
    """
    mask = response_mask.bool()
    target = target.bool() & mask
    k = torch.minimum(k.long(), mask.sum(dim=1)).clamp(min=0)  # (B,)
    s = torch.where(mask, scores.double(), torch.full_like(scores, -math.inf, dtype=torch.float64))  # (B, T)
    ordered = s.sort(dim=1, descending=True).values  # (B, T)
    kth = ordered.gather(1, (k - 1).clamp(min=0)[:, None])  # (B, 1)
    above = (s > kth) & mask  # (B, T)
    tied = (s == kth) & mask  # (B, T)
    slots = (k - above.sum(dim=1)).double()  # (B,) slots left for the tied tokens
    tied_targets = (tied & target).sum(dim=1).double()
    hits = (above & target).sum(dim=1).double() + slots * tied_targets / tied.sum(dim=1).clamp(min=1).double()
    return torch.where(k > 0, hits, torch.zeros_like(hits))


def _ranks(values: torch.Tensor) -> torch.Tensor:
    """Average ranks (1-based, ties share their mean rank) of a 1-D tensor: (N,) float64."""
    order = values.argsort()
    sorted_values = values[order]
    _, inverse, counts = torch.unique_consecutive(sorted_values, return_inverse=True, return_counts=True)
    ends = counts.cumsum(0).double()  # last 1-based rank of each run of ties
    mean_rank = ends - (counts.double() - 1) / 2  # (U,)
    ranks = torch.empty_like(mean_rank[inverse])
    ranks[order] = mean_rank[inverse]
    return ranks


def auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """AUROC of `scores` for binary `labels` (1-D), ties counted half (Mann-Whitney U); NaN if one class."""
    labels = labels.bool()
    n_pos = int(labels.sum())
    n_neg = int(labels.numel()) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    rank_sum = float(_ranks(scores.double())[labels].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman correlation of two 1-D tensors (Pearson of average ranks); NaN if either is constant."""
    rx, ry = _ranks(x.double()), _ranks(y.double())
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = float(rx.norm() * ry.norm())
    return float((rx * ry).sum()) / denominator if denominator > 0 else math.nan


def credit_metrics(advantages: torch.Tensor, key_mask: torch.Tensor, true_credit: torch.Tensor,
                   response_mask: torch.Tensor, style_mask: torch.Tensor | None = None,
                   style_delta: torch.Tensor | None = None) -> dict[str, float]:
    """The section-9 metrics of one seed.

    advantages: (B, T) the pipeline's final A
    key_mask: (B, T) bool/0-1, the true key tokens; true_credit: (B, T) their true task credit
    response_mask: (B, T) bool
    style_mask: (B, T) bool/0-1 violation tokens; style_delta: (B, T) ΔA = A(task+style) - A(task only)
        under the same pipeline. Without them style_recall is NaN.
    returns: {metric: float}; NaN where a metric has nothing to average.
    """
    mask = response_mask.bool()
    keys = key_mask.bool() & mask
    A = advantages.double() * mask  # (B, T), padding exactly 0
    magnitude = A.abs()
    live = (magnitude > 0).any(dim=1)  # (B,) responses that carry any credit

    n_keys = keys.sum(dim=1)  # (B,)
    judged = live & (n_keys > 0)
    recall = topk_hits(magnitude, keys, mask, n_keys) / n_keys.clamp(min=1)
    k2 = 2 * n_keys
    precision = topk_hits(magnitude, keys, mask, k2) / torch.minimum(k2, mask.sum(dim=1)).clamp(min=1)

    total = float(magnitude.sum())
    filler = float((magnitude * (mask & ~keys)).sum())

    real = magnitude[mask]
    out = {
        "key_recall": _mean(recall[judged]),
        "key_precision": _mean(precision[judged]),
        "auroc": auroc(real, keys[mask]),
        "filler_mass": filler / total if total > 0 else math.nan,
        "style_recall": math.nan,
        "sign_accuracy": _mean((torch.sign(A[keys]) == torch.sign(true_credit.double()[keys])).double()),
        "spearman": spearman(A[mask], true_credit.double()[mask]),
    }
    if style_mask is not None and style_delta is not None:
        spans = style_mask.bool() & mask
        n_span = spans.sum(dim=1)
        with_span = live & (n_span > 0)
        share = topk_hits(style_delta.double().abs(), spans, mask, n_span) / n_span.clamp(min=1)
        out["style_recall"] = _mean(share[with_span])
    return out


def _mean(values: torch.Tensor) -> float:
    return float(values.mean()) if values.numel() else math.nan


def batch_metrics(advantages: torch.Tensor, batch,
                  style_delta: torch.Tensor | None = None) -> dict[str, float]:
    """`credit_metrics` reading the oracle fields from a synthetic `RolloutBatch`."""
    ex = batch.extras
    return credit_metrics(advantages, ex["key_mask"], ex["true_credit"], batch.response_mask,
                          ex["style_mask"] if style_delta is not None else None, style_delta)


def summarize(per_seed: list[dict[str, float]]) -> dict[str, float]:
    """Mean and standard deviation (ddof=1; 0 for one seed) over seeds: {m: mean, m_std: std}."""
    out: dict[str, float] = {}
    for name in METRICS:
        values = np.array([row[name] for row in per_seed], dtype=np.float64)
        values = values[~np.isnan(values)]
        out[name] = float(values.mean()) if values.size else math.nan
        spread = float(values.std(ddof=1)) if values.size > 1 else 0.0
        out[f"{name}_std"] = spread if values.size else math.nan
    return out


# ---------------------------------------------------------------------------------------------
# The oracle benchmark


def bench_estimators() -> list[str]:
    """Registered estimators that need no model and no Monte Carlo resampling."""
    from backend.estimators import registry

    return [n for n in registry.names() if not {"model", "mc"} & set(registry.get(n).needs)]


def _pipelines(name: str):
    """The three ways of computing A for estimator `name`: task, mixed/single, mixed/split.

    Each returns a function (batch -> (B, T) advantages); the channel module is imported lazily so
    the metrics stay usable without it.
    """
    from backend import channels
    from backend.estimators.registry import estimate

    def task(batch):
        return estimate(name, batch).advantages

    def single(batch):
        weights = {c: 1.0 for c in batch.scores}
        return channels.mixed_baseline(batch, weights, estimator=name)

    def split(batch):
        specs = {"task": channels.ChannelSpec("task", "estimator", estimator=name)}
        if "style" in batch.scores:
            specs["style"] = channels.ChannelSpec("style", "span")
        return channels.combine(batch, specs).final

    return task, single, split


def oracle_bench(seeds: int = 20, prompts: int = 500, group: int = 8, estimators: list[str] | None = None,
                 progress: Callable[[str], None] | None = None) -> list[dict]:
    """Run every model-free estimator on `seeds` oracle seeds in the `task` and `mixed` settings.

    Rows: setting `task` (task reward only, pipeline `single`) and setting `mixed` (task + style) in
    pipelines `single` (scores summed, one estimator) and `split` (estimator on task, style span
    projected locally, channels normalized separately, combined). style_recall uses the
    counterfactual ΔA = A(task+style) - A(task only) of the same pipeline. Each row has the metric
    means over seeds, `<metric>_std`, `seconds` (estimator + metric time) and `seeds`.
    An estimator that raises is reported once through `progress` and left out.
    """
    from backend.synthetic import OracleConfig, generate, to_batch

    names = list(estimators) if estimators is not None else bench_estimators()
    say = progress or (lambda message: None)
    cfg = OracleConfig(prompts=prompts, group=group)
    per_seed: dict[tuple[str, str, str], list[dict]] = {}
    seconds: dict[tuple[str, str, str], float] = {}
    failed: set[str] = set()
    for seed in range(seeds):
        sample = generate(seed, cfg)
        mixed = to_batch(sample)
        task_only = to_batch(sample, channels=("task",))
        for name in names:
            if name in failed:
                continue
            run_task, run_single, run_split = _pipelines(name)
            try:
                start = time.perf_counter()
                a_task = run_task(task_only)
                rows = [(("task", "single", name), a_task, None)]
                a_single = run_single(mixed)
                rows.append((("mixed", "single", name), a_single, a_single - run_single(task_only)))
                a_split = run_split(mixed)
                rows.append((("mixed", "split", name), a_split, a_split - run_split(task_only)))
                elapsed = time.perf_counter() - start
            except Exception as exc:  # noqa: BLE001 - one broken estimator must not sink the table
                failed.add(name)
                say(f"oracle-bench: skipping {name}: {type(exc).__name__}: {exc}")
                continue
            for key, adv, delta in rows:
                start = time.perf_counter()
                per_seed.setdefault(key, []).append(batch_metrics(adv, mixed, delta))
                seconds[key] = seconds.get(key, 0.0) + time.perf_counter() - start + elapsed / 3
        say(f"oracle-bench: seed {seed + 1}/{seeds} done")
    out = []
    for key, rows in per_seed.items():
        if key[2] in failed:
            continue
        setting, pipeline, name = key
        out.append({"setting": setting, "pipeline": pipeline, "estimator": name, **summarize(rows),
                    "seeds": len(rows), "seconds": round(seconds[key], 3)})
    return out


def format_table(rows: list[dict]) -> str:
    """A fixed-width text table: one line per (setting, pipeline, estimator), `mean ± std` cells."""
    short = {"key_recall": "key_rec", "key_precision": "key_prec", "auroc": "auroc", "filler_mass": "filler",
             "style_recall": "style_rec", "sign_accuracy": "sign_acc", "spearman": "spearman"}
    header = f"{'setting':<7} {'pipeline':<8} {'estimator':<18} "
    header += " ".join(f"{short[m]:>13}" for m in METRICS)
    lines = [header, "-" * len(header)]
    for row in rows:
        cells = []
        for m in METRICS:
            mean, std = row[m], row.get(f"{m}_std", math.nan)
            cells.append(f"{'-':>13}" if math.isnan(mean) else f"{mean:>6.3f}±{std:<6.3f}")
        lines.append(f"{row['setting']:<7} {row['pipeline']:<8} {row['estimator']:<18} " + " ".join(cells))
    return "\n".join(lines)
