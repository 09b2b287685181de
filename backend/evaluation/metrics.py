"""Credit-quality metrics (docs/estimators.md §9); `backend.evaluation.oracle` runs the benchmark that reports
them.

Every metric compares advantages `A: (B, T)` with the oracle fields a synthetic run carries
(`key_mask`, `style_mask`, `true_credit`; see `backend.evaluation.synthetic`). Conventions:
- per-response metrics (key_recall, key_precision, style_recall) average over responses whose
  advantages are not all zero (a zero-variance group carries no credit to judge);
- pooled metrics (auroc, filler_mass, sign_accuracy, spearman) use every real token of the seed;
- top-k ties are resolved by expectation: tokens tied at the k-th largest |A| share the remaining
  slots evenly, so broadcast (all |A| equal) scores the random-guess value k/L, not an artefact of
  the sort order.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from backend.core.ranks import average_ranks, spearman

METRICS = ("key_recall", "key_precision", "auroc", "filler_mass", "style_recall", "sign_accuracy", "spearman")


def topk_hits(
    scores: torch.Tensor, target: torch.Tensor, response_mask: torch.Tensor, k: torch.Tensor
) -> torch.Tensor:
    """Expected number of `target` tokens among each row's top-k tokens by `scores`.

    scores: (B, T) float, compared as given (pass |A|)
    target, response_mask: (B, T) bool
    k: (B,) int64, clamped to [0, L_i]
    returns: (B,) float64 (0 where k = 0)
    """
    return _topk_hits_many(scores, target, response_mask, [k])[0]


def _topk_hits_many(
    scores: torch.Tensor, target: torch.Tensor, response_mask: torch.Tensor, ks: list[torch.Tensor]
) -> list[torch.Tensor]:
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


def auroc(scores: torch.Tensor, labels: torch.Tensor) -> float:
    """AUROC of `scores` for binary `labels` (1-D), ties counted half (Mann-Whitney U); NaN if one class."""
    labels = labels.bool()
    n_pos = int(labels.sum())
    n_neg = int(labels.numel()) - n_pos
    if n_pos == 0 or n_neg == 0:
        return math.nan
    rank_sum = float(average_ranks(scores)[labels.cpu().numpy()].sum())
    return (rank_sum - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)


def credit_metrics(
    advantages: torch.Tensor,
    key_mask: torch.Tensor,
    true_credit: torch.Tensor,
    response_mask: torch.Tensor,
    style_mask: torch.Tensor | None = None,
    style_delta: torch.Tensor | None = None,
    credit_ranks: np.ndarray | None = None,
) -> dict[str, float]:
    """The section-9 metrics of one seed.

    advantages: (B, T) the pipeline's final A
    key_mask: (B, T) bool/0-1, the true key tokens; true_credit: (B, T) their true task credit
    response_mask: (B, T) bool
    style_mask: (B, T) bool/0-1 violation tokens; style_delta: (B, T) ΔA = A(task+style) - A(task only)
        under the same pipeline. Without them style_recall is NaN.
    credit_ranks: optional cached `average_ranks(true_credit[response_mask])`
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


def batch_metrics(
    advantages: torch.Tensor,
    batch,
    style_delta: torch.Tensor | None = None,
    credit_ranks: np.ndarray | None = None,
) -> dict[str, float]:
    """`credit_metrics` reading the oracle fields from a synthetic `RolloutBatch`."""
    ex = batch.extras
    return credit_metrics(
        advantages,
        ex["key_mask"],
        ex["true_credit"],
        batch.response_mask,
        ex["style_mask"] if style_delta is not None else None,
        style_delta,
        credit_ranks,
    )


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
