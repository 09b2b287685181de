"""Credit operators by weighted redistribution (docs/estimators.md section 2).

Each estimator computes weights `w: (B, T)` >= 0 and hands them to `finish_credit`, which makes
`r_t = Z w_t / sum_k w_k` (diagnostic) and `A_t = L r_t` (or GAE over r when `then_gae`). Positions
`t` are 1-based among the real tokens of a response, so mid-sequence masked tokens are skipped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import masked
from backend.estimators.common import (
    CreditConfig,
    OutcomeConfig,
    explain_credit,
    finish_credit,
    finish_rewards,
    outcome_z,
)
from backend.estimators.explaining import Terms, broadcast, first_of, scaled_base, z_from_outcome
from backend.estimators.registry import EstimatorResult, param, register
from backend.estimators.token_helpers import (
    fallback_message,
    masked_entropies,
    rollout_list,
    step_ends,
    token_positions,
)


def explain_high_entropy(v: Terms) -> list[str]:
    """Z from the outcome, kept on high-entropy tokens (A_t = f_t · Z with f_t 0 or 1)."""
    return [*z_from_outcome(v), *first_of(v, scaled_base, broadcast)]


@dataclass(frozen=True)
class TerminalGAEConfig(CreditConfig):
    """All of Z on the last token, then GAE (V = 0, gamma = lam = 1 is broadcast)."""

    then_gae: bool = param(True, help="Run GAE over the token rewards r with the value source, gamma, lam")


@register(
    "terminal_gae",
    TerminalGAEConfig,
    "Terminal reward Z on the last token, then GAE with a value source",
    family="value",
    explain=explain_credit,
)
def terminal_gae(batch: RolloutBatch, config: TerminalGAEConfig) -> EstimatorResult:
    mask = batch.response_mask
    t, L = token_positions(batch)
    return finish_credit(batch, config, outcome_z(batch, config), (t == L) & mask)


@dataclass(frozen=True)
class RecencyConfig(CreditConfig):
    """Recency: w_t = kappa^(L - t)."""

    kappa: float = param(0.97, low=1e-6, high=1.0, help="Decay per token away from the end")


@register(
    "recency",
    RecencyConfig,
    "Credit decays with distance from the end: w = kappa^(L - t)",
    explain=explain_credit,
)
def recency(batch: RolloutBatch, config: RecencyConfig) -> EstimatorResult:
    t, L = token_positions(batch)
    return finish_credit(batch, config, outcome_z(batch, config), torch.pow(config.kappa, L - t))


@dataclass(frozen=True)
class EarlyLateConfig(CreditConfig):
    """Early and late: w_t = kappa^(t - 1) + kappa^(L - t)."""

    kappa: float = param(0.97, low=1e-6, high=1.0, help="Decay per token away from either end")


@register(
    "early_late",
    EarlyLateConfig,
    "Credit at both ends: w = kappa^(t-1) + kappa^(L-t)",
    explain=explain_credit,
)
def early_late(batch: RolloutBatch, config: EarlyLateConfig) -> EstimatorResult:
    t, L = token_positions(batch)
    w = torch.pow(config.kappa, t - 1) + torch.pow(config.kappa, L - t)
    return finish_credit(batch, config, outcome_z(batch, config), w)


@dataclass(frozen=True)
class EntropyConfig(CreditConfig):
    """Entropy weighting: w_t = H_t^p."""

    p: float = param(1.0, low=0.0, high=4.0, help="Power of the entropy")

    def reads(self) -> tuple[str, ...]:
        return ("entropies",)


@register(
    "entropy",
    EntropyConfig,
    "Credit follows the policy entropy: w = H^p",
    needs=("entropies",),
    explain=explain_credit,
)
def entropy(batch: RolloutBatch, config: EntropyConfig) -> EstimatorResult:
    w = torch.pow(masked_entropies(batch), config.p)
    return finish_credit(batch, config, outcome_z(batch, config), w)


BEYOND_8020 = (
    "Wang et al. 2025, 'Beyond the 80/20 Rule' (arXiv 2506.01939); checked against TRL "
    "GRPOTrainer.get_high_entropy_mask (trl 1.16.0, huggingface/trl v1.16.0, called in the tests)"
)


@dataclass(frozen=True)
class HighEntropyConfig(OutcomeConfig):
    """High-entropy mask (Beyond the 80/20 rule): A = Z on tokens with H >= the q-quantile, 0 elsewhere."""

    q: float = param(0.8, low=0.0, high=1.0, help="Entropy quantile threshold: 0.8 keeps the top 20%")
    quantile_over: Literal["batch", "response"] = param(
        "batch",
        help="batch: one threshold over every real token of the batch (the paper, TRL); "
        "response: one per response (our option, not the paper's)",
    )

    def scope(self) -> str:
        return "step" if self.quantile_over == "batch" else "group"  # the batch is the training step


def quantile_of(values: torch.Tensor, q: float) -> torch.Tensor:
    """torch.quantile (linear interpolation) of a 1-D float tensor; a sort-based twin above its size limit."""
    if values.numel() <= 16_000_000:
        return torch.quantile(values, q)
    s = values.sort().values
    pos = q * (s.numel() - 1)
    lo, hi = int(pos), min(int(pos) + 1, s.numel() - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def batch_high_entropy_mask(
    entropies: torch.Tensor, mask: torch.Tensor, q: float
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(B, T) bool tokens with `H >= quantile_q(H over every real token of the batch)`, and that threshold
    (None when the batch has no real token). Same as TRL's `get_high_entropy_mask(entropies, mask, q)`."""
    local = entropies[mask].float()
    if local.numel() == 0:
        return torch.zeros_like(mask), None
    threshold = quantile_of(local, q)
    return (entropies * mask.float() >= threshold) & mask, threshold


def response_high_entropy_mask(batch: RolloutBatch, q: float) -> torch.Tensor:
    """(B, T) bool tokens at or above their own response's q-quantile entropy (our per-response variant)."""
    H = masked_entropies(batch)
    return (H >= masked.row_quantile(H, batch.response_mask, q)) & batch.response_mask


@register(
    "high_entropy_mask",
    HighEntropyConfig,
    "Beyond the 80/20 rule: the policy gradient only on the top-20% entropy tokens of the batch (one "
    "quantile over all real tokens, as TRL's get_high_entropy_mask); A = Z there, unchanged (no "
    "rescaling), 0 elsewhere. quantile_over=response is our per-response variant, not the paper's",
    needs=("entropies",),
    source=BEYOND_8020,
    explain=explain_high_entropy,
)
def high_entropy(batch: RolloutBatch, config: HighEntropyConfig) -> EstimatorResult:
    """A: (B, T) = Z on kept tokens, 0 elsewhere. Diagnostics: Z (B,), base (B, T) broadcast Z,
    kept (B, T) bool, entropy_threshold (a float for the batch, or (B,) per response)."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    H = masked_entropies(batch)
    if config.quantile_over == "batch":
        kept, threshold = batch_high_entropy_mask(H, mask, config.q)
        threshold = None if threshold is None else float(threshold)
    else:
        threshold = masked.row_quantile(H, mask, config.q)[:, 0]
        kept = (H >= threshold[:, None]) & mask
    base = torch.where(mask, z[:, None].expand_as(H), 0.0)
    adv = torch.where(kept, base, 0.0)
    return EstimatorResult(
        adv,
        {
            "Z": z,
            "base": base,
            "kept": kept,
            "weights": kept.to(torch.float32),
            "entropy_threshold": threshold,
            "quantile": config.q,
            "quantile_over": config.quantile_over,
        },
    )


@dataclass(frozen=True)
class StepBoundaryConfig(CreditConfig):
    """Step boundaries: equal weight on the last token of each reasoning step."""

    pattern: str = param(
        r"\n", kind="regex", help="Regex ending a step; the token with the match's last char ends it"
    )


@register(
    "step_boundary",
    StepBoundaryConfig,
    "Equal credit on the last token of each reasoning step",
    explain=explain_credit,
)
def step_boundary(batch: RolloutBatch, config: StepBoundaryConfig) -> EstimatorResult:
    ends, note = step_ends(batch, config.pattern)
    return finish_credit(
        batch, config, outcome_z(batch, config), ends.to(torch.float32), {"step_ends": ends, "note": note}
    )


@dataclass(frozen=True)
class TraceConfig(CreditConfig):
    """Decaying trace (our construction): recent (gamma lam)^(L-t), or both ends averaged."""

    trace_gamma: float = param(1.0, low=0.0, high=1.0, help="Discount of the trace")
    trace_lam: float = param(0.95, low=0.0, high=1.0, help="Lambda of the trace")
    mode: Literal["recent", "both"] = param("recent", help="recent: (gl)^(L-t); both: mean with (gl)^(t-1)")


def trace_weights(batch: RolloutBatch, config) -> torch.Tensor:
    """w: (B, T) float32 decaying-trace weights (not yet normalized)."""
    t, L = token_positions(batch)
    decay = config.trace_gamma * config.trace_lam
    w = torch.pow(decay, L - t)
    if config.mode == "both":
        w = 0.5 * (w + torch.pow(decay, t - 1))
    return w


@register(
    "decaying_trace",
    TraceConfig,
    "Our construction: credit decays away from the end, w = (gamma lam)^(L-t) (or both ends), "
    "redistributed with mean one. Not GRPO-lambda, which traces log-prob gradients",
    aliases=("trace",),
    explain=explain_credit,
)
def decaying_trace(batch: RolloutBatch, config: TraceConfig) -> EstimatorResult:
    return finish_credit(batch, config, outcome_z(batch, config), trace_weights(batch, config))


@dataclass(frozen=True)
class MaskedTraceConfig(TraceConfig):
    """Entropy-masked trace (our construction): the decaying trace on high-entropy tokens, A/Z capped."""

    q: float = param(0.8, low=0.0, high=1.0, help="Entropy quantile of the per-response high-entropy mask")
    cap: float = param(
        5.0,
        low=1.0,
        high=1000.0,
        help="Largest A/Z on one token; the mean-one weights above it are cut (the total push "
        "then falls below broadcast's)",
    )


@register(
    "entropy_masked_trace",
    MaskedTraceConfig,
    "Our construction: the decaying trace restricted to each response's high-entropy tokens, mean-one "
    "weights with A/Z capped at `cap`. Not S-trace (arXiv 2605.05965), which traces importance weights",
    needs=("entropies",),
    aliases=("s_trace",),
    explain=explain_credit,
)
def entropy_masked_trace(batch: RolloutBatch, config: MaskedTraceConfig) -> EstimatorResult:
    """ratio_t = L w_t / sum_k w_k (mean one; uniform where w vanishes on the whole response), then
    A = Z min(ratio, cap) and r = A / L. Diagnostics: weights, ratio (uncapped A/Z), capped (B, T) bool."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    w = torch.where(mask, trace_weights(batch, config) * response_high_entropy_mask(batch, config.q), 0.0)
    total = w.sum(dim=1)
    fallback = (~(total > 0) | ~torch.isfinite(total)) & mask.any(dim=1)
    w = torch.where(fallback[:, None], mask.to(w.dtype), w)
    L = mask.sum(dim=1, keepdim=True).to(torch.float32)
    ratio = w * L / w.sum(dim=1, keepdim=True).clamp(min=torch.finfo(w.dtype).tiny)  # (B, T) mean one
    capped_ratio = ratio.clamp(max=config.cap)
    r = z[:, None] * capped_ratio / L.clamp(min=1)
    return finish_rewards(
        batch,
        config,
        z,
        r,
        {
            "weights": w,
            "ratio": torch.where(mask, ratio, 0.0),
            "capped": (ratio > config.cap) & mask,
            "fallback": fallback_message(batch, fallback),
            "fallback_rollouts": rollout_list(batch, fallback),
        },
    )


@dataclass(frozen=True)
class EntropyMixConfig(CreditConfig):
    """Entropy mix (our construction): w_t = 1 - alpha + alpha H_t / mean_t H (mean one: sign, total kept)."""

    alpha: float = param(0.5, low=0.0, high=1.0, help="0 = broadcast, 1 = entropy weighting")


@register(
    "entropy_mix",
    EntropyMixConfig,
    "Our construction: sign-preserving mix of broadcast and entropy weighting, "
    "w = 1 - a + a H / mean H. "
    "Not HAPO (two different papers use that name)",
    needs=("entropies",),
    aliases=("hapo",),
    explain=explain_credit,
)
def entropy_mix(batch: RolloutBatch, config: EntropyMixConfig) -> EstimatorResult:
    mask = batch.response_mask
    H = masked_entropies(batch)
    mean_h = masked.masked_mean(H, mask, dim=1)[:, None]  # (B, 1)
    flat = (mean_h[:, 0] <= 0) & mask.any(1)
    w = 1.0 - config.alpha + config.alpha * H / mean_h.clamp(min=torch.finfo(H.dtype).tiny)
    w = torch.where(flat[:, None], 1.0, w)
    res = finish_credit(batch, config, outcome_z(batch, config), w)
    if bool(flat.any()):
        res.diagnostics["fallback"] = fallback_message(batch, flat, "zero entropy, uniform fallback")
    return res
