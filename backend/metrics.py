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
    return _topk_hits_many(scores, target, response_mask, [k])[0]


def _topk_hits_many(scores: torch.Tensor, target: torch.Tensor, response_mask: torch.Tensor,
                    ks: list[torch.Tensor]) -> list[torch.Tensor]:
    """`topk_hits` for several k vectors from one `topk` call (key recall at K and precision at 2K)."""
    mask = response_mask.bool()
    target = target.bool() & mask
    lengths = mask.sum(dim=1)  # (B,)
    ks = [torch.minimum(k.long(), lengths).clamp(min=0) for k in ks]  # each (B,)
    k_max = max((int(k.max()) for k in ks if k.numel()), default=0)
    if k_max == 0:
        return [torch.zeros(k.shape, dtype=torch.float64, device=k.device) for k in ks]
    s = torch.where(mask, scores, torch.full_like(scores, -math.inf))  # (B, T)
    # topk, not a full row sort: k_max is small (keys, 2 x keys, a span) and topk is ~10x faster
    top = s.topk(k_max, dim=1).values  # (B, k_max)
    out = []
    for k in ks:
        kth = top.gather(1, (k - 1).clamp(min=0)[:, None])  # (B, 1)
        above = (s > kth) & mask  # (B, T)
        tied = (s == kth) & mask  # (B, T)
        slots = (k - above.sum(dim=1)).double()  # (B,) slots left for the tied tokens
        tied_share = (tied & target).sum(dim=1).double() / tied.sum(dim=1).clamp(min=1).double()
        hits = (above & target).sum(dim=1).double() + slots * tied_share
        out.append(torch.where(k > 0, hits, torch.zeros_like(hits)))
    return out


def _ranks(values: torch.Tensor) -> np.ndarray:
    """Average ranks (1-based, ties share their mean rank) of a 1-D tensor: (N,) float64.

    numpy's sort is several times faster than torch's on CPU for the ~200k pooled tokens of a seed.
    """
    x = values.detach().cpu().numpy()
    order = np.argsort(x)
    ordered = x[order]
    starts = np.empty(x.shape[0], dtype=bool)
    starts[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=starts[1:])
    run = np.cumsum(starts) - 1  # (N,) index of each sorted value's run of ties
    counts = np.bincount(run)
    mean_rank = np.cumsum(counts) - (counts - 1) / 2.0  # (U,)
    ranks = np.empty(x.shape[0], dtype=np.float64)
    ranks[order] = mean_rank[run]
    return ranks


def auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """AUROC of `scores` for binary `labels` (1-D), ties counted half (Mann-Whitney U); NaN if one class."""
    labels = labels.bool()
    n_pos = int(labels.sum())
    n_neg = int(labels.numel()) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    rank_sum = float(_ranks(scores)[labels.cpu().numpy()].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def spearman(x: torch.Tensor, y: torch.Tensor, y_ranks: np.ndarray | None = None) -> float:
    """Spearman correlation of two 1-D tensors (Pearson of average ranks); NaN if either is constant.

    y_ranks: `_ranks(y)` when the caller already has them (the oracle bench reuses the true credit's).
    """
    rx, ry = _ranks(x), (_ranks(y) if y_ranks is None else y_ranks)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    # plain sums, not BLAS dot/norm: BLAS threads fight over two shared cores and are 10x slower here
    denominator = math.sqrt(float(np.square(rx).sum()) * float(np.square(ry).sum()))
    return float(np.multiply(rx, ry).sum()) / denominator if denominator > 0 else math.nan


def credit_metrics(advantages: torch.Tensor, key_mask: torch.Tensor, true_credit: torch.Tensor,
                   response_mask: torch.Tensor, style_mask: torch.Tensor | None = None,
                   style_delta: torch.Tensor | None = None,
                   credit_ranks: np.ndarray | None = None) -> dict[str, float]:
    """The section-9 metrics of one seed.

    advantages: (B, T) the pipeline's final A
    key_mask: (B, T) bool/0-1, the true key tokens; true_credit: (B, T) their true task credit
    response_mask: (B, T) bool
    style_mask: (B, T) bool/0-1 violation tokens; style_delta: (B, T) ΔA = A(task+style) - A(task only)
        under the same pipeline. Without them style_recall is NaN.
    credit_ranks: optional cached `_ranks(true_credit[response_mask])`
    returns: {metric: float}; NaN where a metric has nothing to average.
    """
    mask = response_mask.bool()
    keys = key_mask.bool() & mask
    A = torch.where(mask, advantages.float(), 0.0)  # (B, T), padding exactly 0
    magnitude = A.abs()
    live = (magnitude > 0).any(dim=1)  # (B,) responses that carry any credit

    n_keys = keys.sum(dim=1)  # (B,)
    judged = live & (n_keys > 0)
    k2 = 2 * n_keys
    hits_k, hits_2k = _topk_hits_many(magnitude, keys, mask, [n_keys, k2])
    recall = hits_k / n_keys.clamp(min=1)
    precision = hits_2k / torch.minimum(k2, mask.sum(dim=1)).clamp(min=1)

    total = float(magnitude.sum(dtype=torch.float64))
    filler = float((magnitude * (mask & ~keys)).sum(dtype=torch.float64))

    dense = bool(mask.all())  # fixed-length runs: flatten instead of boolean indexing

    def real(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1) if dense else x[mask]

    out = {
        "key_recall": _mean(recall[judged]),
        "key_precision": _mean(precision[judged]),
        "auroc": auroc(real(magnitude), real(keys)),
        "filler_mass": filler / total if total > 0 else math.nan,
        "style_recall": math.nan,
        "sign_accuracy": _mean((torch.sign(A[keys]) == torch.sign(true_credit[keys])).double()),
        "spearman": spearman(real(A), real(true_credit), credit_ranks),
    }
    if style_mask is not None and style_delta is not None:
        spans = style_mask.bool() & mask
        n_span = spans.sum(dim=1)
        with_span = live & (n_span > 0)
        share = topk_hits(style_delta.float().abs(), spans, mask, n_span) / n_span.clamp(min=1)
        out["style_recall"] = _mean(share[with_span])
    return out


def _mean(values: torch.Tensor) -> float:
    return float(values.mean()) if values.numel() else math.nan


def batch_metrics(advantages: torch.Tensor, batch, style_delta: torch.Tensor | None = None,
                  credit_ranks: np.ndarray | None = None) -> dict[str, float]:
    """`credit_metrics` reading the oracle fields from a synthetic `RolloutBatch`."""
    ex = batch.extras
    return credit_metrics(advantages, ex["key_mask"], ex["true_credit"], batch.response_mask,
                          ex["style_mask"] if style_delta is not None else None, style_delta, credit_ranks)


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
    """Registered estimators that need no model and no Monte Carlo resampling, and whose needs an
    oracle run meets (e.g. `entropy_drop_mask` wants old entropies, which it lacks)."""
    from backend.estimators import registry
    from backend.synthetic import oracle_batch

    probe = oracle_batch(seed=0, prompts=2, group=2)
    return [n for n in registry.supported(probe) if registry.get(n).model_free]


def model_bound_estimators() -> list[str]:
    """Registered estimators that need the policy model (cached model scores or Monte Carlo resampling):
    the oracle bench says "needs a model" for them instead of a row."""
    from backend.estimators import registry

    return [n for n in registry.names() if not registry.get(n).model_free]


def _pipelines(name: str):
    """The three ways of computing A for estimator `name`, each `batch -> (A, ΔA or None)`.

    task: the estimator on the task score. single (mixed): scores summed first, one estimator; its
    task-only counterpart is exactly the `task` pipeline (a sum of one score), so the bench reuses
    that A for ΔA. split (mixed): estimator on task and `span` on style, each group-normalized, then
    summed; `combine` is additive, so A(task+style) - A(task only) is the style contribution it
    returns. The channel module is imported lazily so the metrics stay usable without it.
    """
    from backend import channels
    from backend.estimators.registry import estimate

    def task(batch):
        return estimate(name, batch).advantages

    def single(batch):
        return channels.mixed_baseline(batch, {c: 1.0 for c in batch.scores}, estimator=name)

    def split(batch):
        specs = {"task": channels.ChannelSpec("task", "estimator", estimator=name, normalization="group"),
                 "style": channels.ChannelSpec("style", "span", normalization="group")}
        result = channels.combine(batch, specs)
        return result.final, result.contributions["style"]

    return task, single, split


def _bench_seed(seed: int, prompts: int, group: int, names: list[str], threads: int | None = None) -> dict:
    """One seed of the bench: {"metrics": {key: {metric: v}}, "seconds": {key: s}, "failed": {name: msg}}."""
    from backend.synthetic import OracleConfig, generate, to_batch

    if threads is not None:
        torch.set_num_threads(threads)
    sample = generate(seed, OracleConfig(prompts=prompts, group=group))
    mixed = to_batch(sample)
    task_only = to_batch(sample, channels=("task",))
    credit_ranks = _ranks(mixed.extras["true_credit"][mixed.response_mask])
    out: dict = {"seed": seed, "metrics": {}, "seconds": {}, "failed": {}}
    for name in names:
        run_task, run_single, run_split = _pipelines(name)
        rows = []
        try:
            clock = time.perf_counter()
            a_task = run_task(task_only)
            rows.append((("task", "single", name), a_task, None, time.perf_counter() - clock))
            clock = time.perf_counter()
            a_single = run_single(mixed)
            rows.append((("mixed", "single", name), a_single, a_single - a_task, time.perf_counter() - clock))
            clock = time.perf_counter()
            a_split, style_part = run_split(mixed)
            rows.append((("mixed", "split", name), a_split, style_part, time.perf_counter() - clock))
        except Exception as exc:  # noqa: BLE001 - one estimator that cannot run must not sink the table
            out["failed"][name] = f"{type(exc).__name__}: {exc}"
            continue
        for key, adv, delta, elapsed in rows:
            out["metrics"][key] = batch_metrics(adv, mixed, delta, credit_ranks)
            out["seconds"][key] = elapsed
    return out


def oracle_bench(seeds: int = 20, prompts: int = 500, group: int = 8, estimators: list[str] | None = None,
                 progress: Callable[[str], None] | None = None, workers: int = 1) -> list[dict]:
    """Run every model-free estimator on `seeds` oracle seeds in the `task` and `mixed` settings.

    Rows: setting `task` (task reward only, pipeline `single`) and setting `mixed` (task + style) in
    pipelines `single` (scores summed, one estimator) and `split` (estimator on task, style span
    projected locally, channels group-normalized separately, summed with beta = 1). style_recall uses
    the counterfactual ΔA = A(task+style) - A(task only) of the same pipeline. Each row has the
    metric means over seeds, `<metric>_std`, `seeds`, and `seconds` (estimator time of that row,
    summed over seeds). An estimator that raises on any seed (e.g. it needs fields the oracle does
    not have) is reported through `progress` and left out.

    workers > 1 runs seeds in that many spawned processes with one torch thread each (coarse
    parallelism beats intra-op threads on a small, shared machine); workers = 1 stays in-process.
    """
    names = list(estimators) if estimators is not None else bench_estimators()
    say = progress or (lambda message: None)
    if estimators is None:
        say("oracle-bench: not run (need a model or resampling; the synthetic oracle has no policy): "
            + ", ".join(model_bound_estimators()))
    results: list[dict] = []
    if workers <= 1 or seeds == 1:
        for seed in range(seeds):
            results.append(_bench_seed(seed, prompts, group, names))
            say(f"oracle-bench: seed {seed + 1}/{seeds} done")
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor, as_completed

        context = multiprocessing.get_context("spawn")  # never fork a process that may hold torch threads
        with ProcessPoolExecutor(max_workers=min(workers, seeds), mp_context=context) as pool:
            futures = [pool.submit(_bench_seed, seed, prompts, group, names, 1) for seed in range(seeds)]
            for done, future in enumerate(as_completed(futures), start=1):
                results.append(future.result())
                say(f"oracle-bench: {done}/{seeds} seeds done")
        results.sort(key=lambda r: r["seed"])  # same sums in the same order as in-process
    failed: dict[str, str] = {}
    for result in results:
        for name, message in result["failed"].items():
            failed.setdefault(name, message)
    for name, message in failed.items():
        say(f"oracle-bench: skipped {name}: {message}")
    out = []
    for name in names:
        if name in failed:
            continue
        for key in (("task", "single", name), ("mixed", "single", name), ("mixed", "split", name)):
            per_seed = [r["metrics"][key] for r in results]
            out.append({"setting": key[0], "pipeline": key[1], "estimator": name, **summarize(per_seed),
                        "seeds": len(per_seed), "seconds": round(sum(r["seconds"][key] for r in results), 3)})
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
