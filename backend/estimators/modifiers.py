"""Token-level modifiers and the loss-aggregation view (ESTIMATORS.md section 7).

Modifiers take a base estimator's advantages (`base`, any registered name, run with its defaults
plus this config's `channel`/`outcome` where the base has them) and reshape them per token.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import torch

from backend.batch import BatchError, RolloutBatch
from backend.estimators import masked, registry
from backend.estimators.common import OutcomeConfig, masked_entropies, need, outcome_z
from backend.estimators.credit import high_entropy_mask
from backend.estimators.registry import EstimatorResult, param, register


@dataclass(frozen=True)
class ModifierConfig(OutcomeConfig):
    """A modifier applied on top of a base estimator."""

    base: str = param("grpo", kind="base_estimator",
                      help="Base estimator whose advantages are modified (any registered non-modifier)")

    def scope(self) -> str:
        """The base estimator's scope (a modifier of token_rm needs the run)."""
        return registry.get(self.base).scope_for(base_config(self))


def base_advantages(batch: RolloutBatch, config: ModifierConfig) -> torch.Tensor:
    """(B, T) advantages of `config.base` with its defaults, sharing channel/outcome/epsilon."""
    return registry.get(config.base).fn(batch, base_config(config)).advantages


def base_config(config: ModifierConfig):
    """The base estimator's config: its defaults, sharing channel/outcome/epsilon with the modifier."""
    spec = registry.get(config.base)
    if spec.family in ("modifier", "aggregation"):
        raise ValueError(f"base {config.base!r} is itself a modifier; pick an estimator such as grpo")
    known = {f.name for f in dataclasses.fields(spec.config_cls)}
    shared = {k: getattr(config, k) for k in ("channel", "outcome", "epsilon") if k in known}
    return spec.config_cls(**shared)


@dataclass(frozen=True)
class GTPOConfig(OutcomeConfig):
    """GTPO-style polarity-aware entropy shaping, whitened separately over O+ and O- tokens."""

    beta: float = param(0.1, low=0.0, high=10.0, help="Weight of the whitened entropy term")
    keep_sign: bool = param(True, help="Clip so no token's advantage flips sign against Z")

    def scope(self) -> str:
        return "step"  # the entropies are whitened over the training batch


@register("gtpo", GTPOConfig, "Entropy-shaped token rewards, polarity-aware (GTPO-style)",
          needs=("entropies",), family="modifier")
def gtpo(batch: RolloutBatch, config: GTPOConfig) -> EstimatorResult:
    """`A = Z + beta * white(H)` where `white` z-scores the entropies over all real tokens of the positive
    responses (Z > 0) and, separately, of the negative ones (Z < 0): in correct responses high entropy
    gets more credit, in incorrect ones low-entropy tokens get the stronger penalty. Z = 0 stays 0."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    H = masked_entropies(batch)
    shaped = torch.zeros_like(H)
    for sign in (1.0, -1.0):
        rows = (torch.sign(z) == sign)[:, None] & mask  # (B, T)
        if bool(rows.any()):
            shaped = torch.where(rows, masked.masked_whiten(H, rows), shaped)
    adv = z[:, None] + config.beta * shaped
    if config.keep_sign:
        zc = z[:, None]
        adv = torch.where(zc > 0, adv.clamp(min=0.0), torch.where(zc < 0, adv.clamp(max=0.0), 0.0))
    adv = torch.where(mask & (z[:, None] != 0), adv, 0.0)
    return EstimatorResult(adv, {"Z": z, "shaped_entropy": shaped})


@dataclass(frozen=True)
class EntropyGateConfig(ModifierConfig):
    """Entropy gating (ERPO / EP-GRPO-style): amplify |A| at high-entropy pivots."""

    factor: float = param(1.5, low=0.0, high=10.0, help="Multiplier of A at pivot tokens")
    q: float = param(0.8, low=0.0, high=1.0, help="Pivots: entropy at or above this quantile of the response")


@register("entropy_gate", EntropyGateConfig, "Amplify the advantage at high-entropy pivot tokens",
          needs=("entropies",), family="modifier")
def entropy_gate(batch: RolloutBatch, config: EntropyGateConfig) -> EstimatorResult:
    base = base_advantages(batch, config)
    pivots = high_entropy_mask(batch, config.q)
    adv = torch.where(pivots, base * config.factor, base)
    return EstimatorResult(torch.where(batch.response_mask, adv, 0.0), {"base": base, "pivots": pivots})


@dataclass(frozen=True)
class STAREConfig(ModifierConfig):
    """STARE-style: weight the top-P% surprisal tokens among A > 0 by W."""

    top_p: float = param(0.1, low=0.0, high=1.0, help="Share of the A > 0 tokens that are boosted")
    weight: float = param(1.1, low=0.0, high=10.0, help="Multiplier W of the boosted tokens")

    def scope(self) -> str:
        return registry.widest("step", super().scope())  # the surprisal quantile is over the batch


@register("stare", STAREConfig, "Boost the most surprising tokens among positive advantages",
          needs=("logprobs",), family="modifier")
def stare(batch: RolloutBatch, config: STAREConfig) -> EstimatorResult:
    """The top share is pooled over the batch (a batch-level quantile of surprisal among A > 0 tokens)."""
    mask = batch.response_mask
    base = base_advantages(batch, config)
    surprisal = -need(batch, "logprobs")
    positive = (base > 0) & mask
    boosted = torch.zeros_like(positive)
    n = int(positive.sum())
    n_top = math.ceil(config.top_p * n)
    if n and n_top:
        values = surprisal[positive]
        threshold = values.kthvalue(n - n_top + 1).values
        boosted = positive & (surprisal >= threshold)
    adv = torch.where(boosted, base * config.weight, base)
    return EstimatorResult(torch.where(mask, adv, 0.0), {"base": base, "boosted": boosted})


@dataclass(frozen=True)
class TEPOMaskConfig(ModifierConfig):
    """TEPO-style KL mask: tokens with A > 0 whose entropy fell versus the old policy."""

    scale: float = param(0.0, low=0.0, high=1.0, help="Multiplier of A on masked tokens (0 drops them)")


@register("tepo_mask", TEPOMaskConfig, "Mask positive-advantage tokens whose entropy fell vs the old policy",
          needs_one_of=(("entropies", "old_entropies"), ("logprobs", "ref_logprobs")), family="modifier")
def tepo_mask(batch: RolloutBatch, config: TEPOMaskConfig) -> EstimatorResult:
    """Old-policy entropies come from extras `old_entropies`; without them the token's surprisal under
    the reference (`ref_logprobs`) stands in: the entropy 'fell' where logprob > ref_logprob."""
    mask = batch.response_mask
    base = base_advantages(batch, config)
    old = batch.extras.get("old_entropies")
    if old is not None and batch.entropies is not None:
        fell = batch.entropies.to(torch.float32) < old.to(torch.float32)
        source = "old_entropies"
    elif batch.logprobs is not None and batch.ref_logprobs is not None:
        fell = batch.logprobs.to(torch.float32) > batch.ref_logprobs.to(torch.float32)
        source = "logprobs vs ref_logprobs (no old_entropies)"
    else:
        raise BatchError("tepo_mask needs entropies with extras old_entropies, or logprobs and ref_logprobs")
    marked = (base > 0) & fell & mask
    adv = torch.where(marked, base * config.scale, base)
    return EstimatorResult(torch.where(mask, adv, 0.0), {"base": base, "mask": marked, "source": source})


@dataclass(frozen=True)
class AggregationConfig(ModifierConfig):
    """The effective per-token push c_{i,t} A_{i,t} under a loss-aggregation mode."""

    mode: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum", "dr-grpo"] = param(
        "seq-mean-token-mean", help="Loss aggregation: 1/(B L_i), 1/sum L, 1/B, 1/L_max")
    normalize: bool = param(True, help="Multiply c by the batch's real-token count (token-mean gives c = 1)")

    def scope(self) -> str:
        return registry.widest("step", super().scope())  # c depends on the batch size and lengths


@register("aggregation", AggregationConfig, "Effective per-token push c * A under a loss-aggregation mode",
          family="aggregation")
def aggregation(batch: RolloutBatch, config: AggregationConfig) -> EstimatorResult:
    """c: seq-mean-token-mean 1/(B L_i); token-mean (DAPO) 1/sum_j L_j; seq-mean-token-sum 1/B;
    dr-grpo 1/L_max with L_max the longest response of the batch (verl divides by the padded width,
    which depends on padding; we use the longest real response). `normalize` rescales every mode by
    N = sum_j L_j so the numbers are per-token pushes comparable with A."""
    mask = batch.response_mask
    base = base_advantages(batch, config)
    L = mask.sum(dim=1, keepdim=True).to(torch.float32).clamp(min=1)  # (B, 1)
    B = max(batch.B, 1)
    N = float(mask.sum().clamp(min=1))
    if config.mode == "seq-mean-token-mean":
        c = 1.0 / (B * L)
    elif config.mode == "token-mean":
        c = torch.full_like(L, 1.0 / N)
    elif config.mode == "seq-mean-token-sum":
        c = torch.full_like(L, 1.0 / B)
    else:
        c = torch.full_like(L, 1.0 / float(L.max()))
    if config.normalize:
        c = c * N
    weights = torch.where(mask, c.expand_as(base), 0.0)
    return EstimatorResult(weights * base, {"base": base, "weights": weights})
