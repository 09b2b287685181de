"""Credit operators by weighted redistribution (ESTIMATORS.md section 2).

Each estimator computes weights `w: (B, T)` >= 0 and hands them to `finish_credit`, which makes
`r_t = Z w_t / sum_k w_k` (diagnostic) and `A_t = L r_t` (or GAE over r when `then_gae`). Positions
`t` are 1-based among the real tokens of a response, so mid-sequence masked tokens are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

import numpy as np
import torch

from backend.batch import RolloutBatch
from backend.estimators import masked
from backend.estimators.common import (
    CreditConfig,
    fallback_message,
    finish_credit,
    masked_entropies,
    outcome_z,
    token_positions,
)
from backend.estimators.registry import EstimatorResult, param, register


@dataclass(frozen=True)
class TerminalGAEConfig(CreditConfig):
    """All of Z on the last token, then GAE (V = 0, gamma = lam = 1 is broadcast)."""

    then_gae: bool = param(True, help="Run GAE over the token rewards r with the value source, gamma, lam")


@register("terminal_gae", TerminalGAEConfig,
          "Terminal reward Z on the last token, then GAE with a value source", family="value")
def terminal_gae(batch: RolloutBatch, config: TerminalGAEConfig) -> EstimatorResult:
    mask = batch.response_mask
    t, L = token_positions(batch)
    return finish_credit(batch, config, outcome_z(batch, config), (t == L) & mask)


@dataclass(frozen=True)
class RecencyConfig(CreditConfig):
    """Recency: w_t = kappa^(L - t)."""

    kappa: float = param(0.97, low=1e-6, high=1.0, help="Decay per token away from the end")


@register("recency", RecencyConfig, "Credit decays with distance from the end: w = kappa^(L - t)")
def recency(batch: RolloutBatch, config: RecencyConfig) -> EstimatorResult:
    t, L = token_positions(batch)
    return finish_credit(batch, config, outcome_z(batch, config), torch.pow(config.kappa, L - t))


@dataclass(frozen=True)
class EarlyLateConfig(CreditConfig):
    """Early and late: w_t = kappa^(t - 1) + kappa^(L - t)."""

    kappa: float = param(0.97, low=1e-6, high=1.0, help="Decay per token away from either end")


@register("early_late", EarlyLateConfig, "Credit at both ends: w = kappa^(t-1) + kappa^(L-t)")
def early_late(batch: RolloutBatch, config: EarlyLateConfig) -> EstimatorResult:
    t, L = token_positions(batch)
    w = torch.pow(config.kappa, t - 1) + torch.pow(config.kappa, L - t)
    return finish_credit(batch, config, outcome_z(batch, config), w)


@dataclass(frozen=True)
class EntropyConfig(CreditConfig):
    """Entropy weighting: w_t = H_t^p."""

    p: float = param(1.0, low=0.0, high=4.0, help="Power of the entropy")


@register("entropy", EntropyConfig, "Credit follows the policy entropy: w = H^p", needs=("entropies",))
def entropy(batch: RolloutBatch, config: EntropyConfig) -> EstimatorResult:
    w = torch.pow(masked_entropies(batch), config.p)
    return finish_credit(batch, config, outcome_z(batch, config), w)


@dataclass(frozen=True)
class HighEntropyConfig(CreditConfig):
    """High-entropy mask: w_t = 1[H_t >= q-quantile of the response]."""

    q: float = param(0.8, low=0.0, high=1.0, help="Quantile of the response's entropies")


def high_entropy_mask(batch: RolloutBatch, q: float) -> torch.Tensor:
    """(B, T) bool tokens at or above the response's q-quantile entropy."""
    H = masked_entropies(batch)
    return (H >= masked.row_quantile(H, batch.response_mask, q)) & batch.response_mask


@register("high_entropy_mask", HighEntropyConfig, "Equal credit on the top-entropy tokens of each response",
          needs=("entropies",))
def high_entropy(batch: RolloutBatch, config: HighEntropyConfig) -> EstimatorResult:
    w = high_entropy_mask(batch, config.q).to(torch.float32)
    return finish_credit(batch, config, outcome_z(batch, config), w)


@dataclass(frozen=True)
class StepBoundaryConfig(CreditConfig):
    """Step boundaries: equal weight on the last token of each reasoning step."""

    pattern: str = param(r"\n", kind="regex",
                         help="Regex ending a step; the token with the match's last char ends it")


def step_ends(batch: RolloutBatch, pattern: str) -> tuple[torch.Tensor, str | None]:
    """(B, T) bool last token of each step, and a note when the run has no token text.

    The regex runs once per response over its joined text; character offsets map to tokens with one
    `searchsorted`, so there is no python loop over tokens. The last real token always ends a step.
    """
    mask = batch.response_mask
    t, L = token_positions(batch)
    last = (t == L) & mask
    if batch.tokens is None:
        return last, "no token text in this run: step ends unknown, used the last token only"
    regex = re.compile(pattern)
    flat_ends = np.zeros(int(mask.sum()), dtype=bool)
    offset = 0
    for row in batch.tokens:
        if row:
            cum = np.cumsum(np.fromiter(map(len, row), dtype=np.int64, count=len(row)))
            chars = np.fromiter((m.end() - 1 for m in regex.finditer("".join(row)) if m.end() > m.start()),
                                dtype=np.int64)
            if chars.size:
                flat_ends[offset + np.searchsorted(cum, chars, side="right")] = True
        offset += len(row)
    if offset != flat_ends.shape[0]:
        return last, "token text does not line up with the response mask: used the last token only"
    ends = torch.zeros(mask.shape, dtype=torch.bool)
    ends[mask.cpu()] = torch.from_numpy(flat_ends)
    return ends.to(batch.device) | last, None


@register("step_boundary", StepBoundaryConfig, "Equal credit on the last token of each reasoning step")
def step_boundary(batch: RolloutBatch, config: StepBoundaryConfig) -> EstimatorResult:
    ends, note = step_ends(batch, config.pattern)
    return finish_credit(batch, config, outcome_z(batch, config), ends.to(torch.float32),
                         {"step_ends": ends, "note": note})


@dataclass(frozen=True)
class TraceConfig(CreditConfig):
    """Eligibility trace (GRPO-lambda-style): recent (gamma lam)^(L-t), or both ends averaged."""

    trace_gamma: float = param(1.0, low=0.0, high=1.0, help="Discount of the trace")
    trace_lam: float = param(0.95, low=0.0, high=1.0, help="Lambda of the trace")
    mode: Literal["recent", "both"] = param("recent", help="recent: (gl)^(L-t); both: mean with (gl)^(t-1)")


def trace_weights(batch: RolloutBatch, config) -> torch.Tensor:
    t, L = token_positions(batch)
    decay = config.trace_gamma * config.trace_lam
    w = torch.pow(decay, L - t)
    if config.mode == "both":
        w = 0.5 * (w + torch.pow(decay, t - 1))
    return w


@register("trace", TraceConfig, "Eligibility-trace credit (GRPO-lambda-style)")
def trace(batch: RolloutBatch, config: TraceConfig) -> EstimatorResult:
    return finish_credit(batch, config, outcome_z(batch, config), trace_weights(batch, config))


@dataclass(frozen=True)
class STraceConfig(TraceConfig):
    """S-trace: the trace restricted to high-entropy tokens, renormalized."""

    q: float = param(0.8, low=0.0, high=1.0, help="Entropy quantile of the high-entropy mask")


@register("s_trace", STraceConfig, "Eligibility trace restricted to high-entropy tokens",
          needs=("entropies",))
def s_trace(batch: RolloutBatch, config: STraceConfig) -> EstimatorResult:
    w = trace_weights(batch, config) * high_entropy_mask(batch, config.q)
    return finish_credit(batch, config, outcome_z(batch, config), w)


@dataclass(frozen=True)
class HAPOConfig(CreditConfig):
    """HAPO-style capacity: w_t = 1 - alpha + alpha H_t / mean_t H (mean one: sign and total kept)."""

    alpha: float = param(0.5, low=0.0, high=1.0, help="0 = broadcast, 1 = entropy weighting")


@register("hapo", HAPOConfig, "Sign-preserving entropy capacity: w = 1 - a + a H / mean H",
          needs=("entropies",))
def hapo(batch: RolloutBatch, config: HAPOConfig) -> EstimatorResult:
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
