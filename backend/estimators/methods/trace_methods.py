"""Eligibility-trace methods that act on the policy-gradient term.

`log_ratio_trace` is built after GRPO-λ's ε-trace (Parthasarathi, Reymond, Chen, Cui, Chandar, arXiv
2510.00194, section 3.2, Eq. 2) as public reimplementations quote it. It has a descriptive name, not the
paper's, because the paper's text past page 1 could not be read here and no official code exists to check
it against (defaults such as the −0.1 clamp are the reimplementations'). The ε-trace does not reweight the
outcome: it replaces each token's PPO ratio by a traced one,

    log ρ̃_t = Σ_{l=0}^{t} tr(t, l) · (log π(o_{t-l}) − log π_old(o_{t-l}))      (0-based t, l)
    tr(t, l) = (γλ)^l                          ("recent", the classic accumulating trace)
    tr(t, l) = max((γλ)^l, (γλ)^{t-l})         ("both": the early tokens keep weight too)

and maximizes Σ_t min(ρ̃_t δ̂, clip(ρ̃_t) δ̂), where the critic-free TD error δ̂ is the group-normalized
advantage Z (negative Z clamped to −0.1 in the paper). What Credit Lens shows is the advantage each token's
gradient gets: at the start of each update (π = π_old, so ρ̃ = 1 and no clip is active) the gradient is
Z' Σ_t ∇ log ρ̃_t, which gives ∇ log π(o_j) the weight

    A_j = Z' · W_j,   W_j = Σ_{t ≥ j} tr(t, t − j)

(1-based below: W_j = Σ_{k=0}^{L−j} (γλ)^k for recent; for both, the k-th term is max((γλ)^k, (γλ)^{j−1})).
Earlier tokens sit in more later tokens' traces, so W grows toward the start of the response, up to
1/(1 − γλ) for recent. The loss's own length normalization (1/|o| in GRPO) is left to the aggregation, as
for every other estimator. Where the formulas come from: `TRACE_SOURCE`; docs/estimators.md §2c.

S-trace (arXiv 2605.05965) is not here: its P-trace and selection rule could not be read (docs §2).
Positions are among a response's real tokens (mid-sequence masked tokens are skipped). Twin:
twins/trace_methods.py.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from backend.core.batch import RolloutBatch
from backend.estimators.common import OutcomeConfig, outcome_z
from backend.estimators.explaining import Terms, broadcast, first_of, z_from_outcome
from backend.estimators.registry import EstimatorResult, param, register
from backend.estimators.token_helpers import token_positions

TRACE_SOURCE = (
    "Built after GRPO-λ (Parthasarathi, Reymond, Chen, Cui, Chandar, arXiv 2510.00194), the ε-trace of "
    "section 3.2, "
    "Eq. 2 (trace weights 'recent' and 'both'), with the group-normalized advantage as the critic-free TD "
    "error and negative advantages clamped to −0.1. The paper's text past its first page could not be read "
    "here and no official code was found: the equations come from public reimplementations that quote Eq. 2 "
    "(unstoppable-learner/RLVR-for-Mathematical-Reasoning-on-Qwen2.5-Math-1.5B-Reproducing-and-Comparing-"
    "GRPO-Variants@4adb0992f9de47d634904a83b62b0c22056144ee GRPO/GRPO_lambda_epsilon_trace_no_adv_clip.py, "
    "and two others, docs/estimators.md §2c), which agree. Shown: the per-token gradient weight at π = π_old"
)


@dataclass(frozen=True)
class LogRatioTraceConfig(OutcomeConfig):
    """A λ-decayed trace of log-ratios (after GRPO-λ's ε-trace) read as per-token gradient weights:
    A_j = Z' · Σ_{t ≥ j} tr(t, t − j)."""

    trace_gamma: float = param(1.0, low=0.0, high=1.0, help="Discount γ of the trace (decay per token is γλ)")
    trace_lam: float = param(0.99, low=0.0, high=1.0, help="Trace λ (decay per token is γλ)")
    weighting: Literal["recent", "both"] = param(
        "recent", help="recent: tr = (γλ)^l; both: tr = max((γλ)^l, (γλ)^(t−l)), early tokens keep weight"
    )
    clamp_negative: bool = param(
        True,
        help="Clamp negative advantages at `floor` (the paper: with traced "
        "log-probabilities, negative advantages destabilize training)",
    )
    floor: float = param(-0.1, low=-10.0, high=0.0, help="The clamp of negative advantages (the paper: −0.1)")


def clamped_z(z: torch.Tensor, config: LogRatioTraceConfig) -> torch.Tensor:
    """Z': (B,) the advantage GRPO-λ uses, max(Z, floor) when `clamp_negative`."""
    return z.clamp(min=config.floor) if config.clamp_negative else z


def geometric_sum(d: float, n: torch.Tensor) -> torch.Tensor:
    """Σ_{k=0}^{n−1} d^k for a (B, T) float64 count n >= 0: n when d = 1, (1 − d^n) / (1 − d) otherwise."""
    if d == 1.0:
        return n
    if d == 0.0:
        return (n > 0).to(torch.float64)  # 0^0 = 1: only the token itself
    return -torch.expm1(n * math.log(d)) / (1.0 - d)  # expm1: exact for d near 1, where 1 − d^n is small


def trace_sums(batch: RolloutBatch, config: LogRatioTraceConfig) -> torch.Tensor:
    """W: (B, T) float64, W_j = Σ_{t ≥ j} tr(t, t − j) over the real tokens (0 on padding).

    With n = L − j + 1 later-or-equal tokens and d = γλ: recent is the geometric sum of n terms. For both,
    the k-th term max(d^k, d^{j−1}) is d^k while k ≤ j − 1 (d^k falls with k) and d^{j−1} after, so
    W_j = Σ_{k<m} d^k + (n − m) d^{j−1} with m = min(n, j)."""
    t, L = token_positions(batch)  # (B, T) 1-based, (B, 1)
    t, L = t.to(torch.float64), L.to(torch.float64)
    d = config.trace_gamma * config.trace_lam
    n = (L - t + 1).clamp(min=0)  # (B, T)
    if config.weighting == "recent":
        w = geometric_sum(d, n)
    else:
        m = torch.minimum(n, t)
        w = geometric_sum(d, m) + (n - m) * torch.pow(torch.tensor(d, dtype=torch.float64), t - 1)
    return torch.where(batch.response_mask, w, 0.0)


def trace_lines(v: Terms) -> list[str]:
    """A_t = Z' · W_t, W_t the trace summed over the tokens from t on."""
    W, cfg = v.at("trace_sum"), v.cfg
    if W is None or v.seq.get("Z_used") is None:
        return []
    decay = float(cfg.get("trace_gamma", 1.0)) * float(cfg.get("trace_lam", 1.0))
    lines = []
    if cfg.get("clamp_negative"):
        floor, Z = float(cfg.get("floor", 0.0)), v.seq.get("Z") or 0.0
        lines.append(f"Z' = max(Z, floor) = max({Z:.4g}, {floor:g}) = {v.seq['Z_used']:.4g}")
    lines.append(
        f"W_t = Σ_(u ≥ t) tr(u, u − t) = {W:.4g}   ({cfg.get('weighting')} trace, "
        f"γλ = {decay:.4g}, over the {len(v.tok['advantage']) - v.t} tokens from t on)"
    )
    lines.append(f"A_t = Z' · W_t = {v.seq['Z_used']:.4g} × {W:.4g} = {v.A:.4g}")
    return lines


def explain_trace(v: Terms) -> list[str]:
    return [*z_from_outcome(v), *first_of(v, trace_lines, broadcast)]


@register(
    "log_ratio_trace",
    LogRatioTraceConfig,
    "A λ-decayed trace of log-ratios (after GRPO-λ's ε-trace, arXiv 2510.00194 Eq. 2 as "
    "reimplementations quote it; the paper was not read) as the advantage each token's gradient gets "
    "at "
    "π = π_old: A_j = Z' Σ_{t≥j} tr(t, t−j), tr = (γλ)^l (recent) or max((γλ)^l, (γλ)^(t−l)) (both); "
    "credit grows toward the start; negative Z clamped at −0.1",
    family="trace",
    source=TRACE_SOURCE,
    explain=explain_trace,
)
def log_ratio_trace(batch: RolloutBatch, config: LogRatioTraceConfig) -> EstimatorResult:
    """A: (B, T) = Z' W. Diagnostics: Z (B,) the group-normalized advantage, Z_used (B,) after the clamp,
    trace_sum (B, T) W, clamped (B,) bool where the clamp changed Z."""
    mask = batch.response_mask
    z = outcome_z(batch, config)  # (B,)
    z_used = clamped_z(z, config)
    w = trace_sums(batch, config)  # (B, T) float64
    adv = (z_used.to(torch.float64)[:, None] * w).to(torch.float32)
    return EstimatorResult(
        torch.where(mask, adv, 0.0),
        {"Z": z, "Z_used": z_used, "trace_sum": w.to(torch.float32), "clamped": z_used != z},
    )
