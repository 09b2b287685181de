"""Estimators over per-token scores of the policy model: OAR-P, OAR-G (outcome-grounded advantage
reshaping) and GCPO (guidance-contrastive weights).

The scores are computed once by `creditlens model-credit` (backend/models/model_credit.py, which cites
the papers and the official code each step follows) and cached in the store; a batch carries them as the
extras `<name>_scores` / `<name>_mask` (1 on scored tokens). Each estimator reshapes the group-relative
outcome Z token by token, `A_t = Z * w_t`, with the official weight rule:

- OAR (Valsure/Outcome-Grounded-Advantage-Reshaping `calculate_oar_hybrid_weights`): per response,
  s = log1p(score), min-max normalized to [0, 1]; tau = the `threshold`-quantile of the normalized
  scores; below tau `w = max(s / tau, floor)` (noise suppression), else `w = 1 + beta (s - tau) /
  (1 - tau)` (signal boosting); with `sum_to_length` the scored tokens' weights are rescaled to mean
  one. Unscored tokens (the conclude text and the answer) keep w = 1, as the official code pads them.
- GCPO (jacklishufan/gcpo `compute_importance_weights`, "kl" + "hist"): per token the pointwise KL
  estimate `d = e^delta - delta - 1` of delta = log p_neg - log p_pos (clamped as there); per response
  the rank percentile u in (0, 1] of d, `w = u^alpha` renormalized to mean one, with
  `alpha = log(1 - mass) / log(1 - top) - 1` (top = 0.4, mass = 0.8 there: the top 40% of tokens carry
  80% of the weight).

Where we differ from the code, on purpose: a negative OAR-P score (padding a token out made the answer
more likely) counts as 0 (log1p of a score below -1 is NaN there); every response uses the configured
quantile (the official loop reassigns `threshold` to the first response's quantile value, which later
responses of the same call then take as their quantile level); GCPO ties in d rank by position (the
official unstable `argsort` leaves them unordered). tests/backend/estimators/test_official.py checks both
weight rules against the official functions' outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from backend.core.batch import RolloutBatch, model_score_needs
from backend.estimators import masked
from backend.estimators.common import OutcomeConfig, fallback_message, outcome_z, rollout_list
from backend.estimators.explaining import Terms, broadcast, first_of, z_from_outcome
from backend.estimators.registry import EstimatorResult, param, register

OAR_SOURCE = (
    "Li et al. 2026, arXiv 2601.07408 (OAR); official code Valsure/Outcome-Grounded-Advantage-"
    "Reshaping OAR-main.py @8dbc47862b5c3636b6070be16c9a181b17ca6346 (pfinal_mode answer_joint)"
)
GCPO_SOURCE = (
    "Li et al. 2026, arXiv 2605.29198 (GCPO); official code jacklishufan/gcpo "
    "verl/workers/actor/dp_actor.py @e0f183de1ddad5714587be3eaed5b01be44724ee "
    "(importance_weighting_type kl, importance_normalization hist)"
)


@dataclass(frozen=True)
class OARConfig(OutcomeConfig):
    """OAR's bi-level reshaping of Z by the cached influence scores."""

    threshold: float = param(
        0.5,
        low=0.0,
        high=1.0,
        help="Quantile of a response's normalized influence that splits suppression from boosting",
    )
    beta: float = param(
        1.0, low=0.0, high=10.0, help="Boost: weights above the threshold rise from 1 to 1 + beta"
    )
    floor: float = param(0.1, low=0.0, high=1.0, help="Least weight of a suppressed token (0.1 in the code)")
    sum_to_length: bool = param(True, help="Rescale the scored tokens' weights to mean one (sum_to_L)")


def oar_weights(
    scores: torch.Tensor, scored: torch.Tensor, config: OARConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """w: (B, T) float32 OAR weights, 1 off the scored tokens; and (B,) bool rows with no scored token.

    scores: (B, T) influence (a negative OAR-P drop counts as 0, where log1p would be NaN below -1);
    scored: (B, T) bool."""
    s = torch.where(scored, torch.log1p(scores.to(torch.float64).clamp(min=0.0)), 0.0)  # (B, T)
    big = torch.finfo(torch.float64).max
    low = torch.where(scored, s, big).min(dim=1, keepdim=True).values  # (B, 1)
    high = torch.where(scored, s, -big).max(dim=1, keepdim=True).values
    spread = torch.where(high > low, high - low, 1.0)
    norm = torch.where(scored, (s - torch.where(scored.any(1, keepdim=True), low, 0.0)) / spread, 0.0)
    tau = masked.row_quantile(norm, scored, config.threshold)  # (B, 1)
    suppressed = norm < tau
    w = torch.where(
        suppressed,
        (norm / (tau + 1e-8)).clamp(min=config.floor),
        1.0 + config.beta * (norm - tau) / (1.0 - tau + 1e-8),
    )
    w = torch.where(scored, w, 0.0)
    if config.sum_to_length:
        n = scored.sum(dim=1, keepdim=True).to(torch.float64)
        total = w.sum(dim=1, keepdim=True)
        w = torch.where(total > 0, w * (n / (total + 1e-8)), torch.where(scored, 1.0, 0.0))
    empty = ~scored.any(dim=1)
    return torch.where(scored, w, 1.0).to(torch.float32), empty


def _reshape(
    batch: RolloutBatch,
    config,
    name: str,
    weights: torch.Tensor,
    empty: torch.Tensor,
    scores: torch.Tensor,
    scored: torch.Tensor,
) -> EstimatorResult:
    mask = batch.response_mask
    z = outcome_z(batch, config)
    w = torch.where(mask, weights, 0.0)
    adv = z[:, None] * w  # (B, T)
    diagnostics = {
        "Z": z,
        "weights": w,
        f"{name}_score": torch.where(mask & scored, scores, 0.0),
        "scored": (mask & scored).to(torch.float32),
        "fallback": fallback_message(batch, empty & mask.any(1), "no scored token (w = 1)"),
        "fallback_rollouts": rollout_list(batch, empty & mask.any(1)),
    }
    return EstimatorResult(advantages=torch.where(mask, adv, 0.0), diagnostics=diagnostics)


def scored_lines(v: Terms) -> list[str]:
    """The cached model score at t and its weight; A_t = Z · w_t."""
    w = v.at("weights")
    if w is None or "scored" not in v.tok or v.seq.get("Z") is None:
        return []
    score = next((f"{k} = {v.at(k):.4g}" for k in v.tok if k.endswith("_score") and v.at(k) is not None), "")
    if v.at("scored"):
        divergence = v.at("divergence")
        lines = [
            f"cached model score at t: {score}"
            + (f", divergence d_t = {divergence:.4g}" if divergence is not None else "")
        ]
    else:
        lines = ["t is not scored (conclude text, answer, or no answer found): w_t = 1"]
    return [*lines, f"A_t = Z · w_t = {v.seq['Z']:.4g} × {w:.4g} = {v.A:.4g}"]


def explain_scored(v: Terms) -> list[str]:
    return [*z_from_outcome(v), *first_of(v, scored_lines, broadcast)]


def _cached(batch: RolloutBatch, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    scores_name, mask_name = model_score_needs(name)
    scored = (batch.extras[mask_name] > 0) & batch.response_mask
    return batch.extras[scores_name].to(torch.float32), scored


def _oar(name: str):
    def fn(batch: RolloutBatch, config: OARConfig) -> EstimatorResult:
        scores, scored = _cached(batch, name)
        weights, empty = oar_weights(scores, scored, config)
        return _reshape(batch, config, name, weights, empty, scores, scored)

    return fn


register(
    "oar_p",
    OARConfig,
    "OAR-P: Z reshaped by each reasoning token's influence on the final answer, measured by padding the "
    "token out (bi-level: suppress low, boost high); needs `creditlens model-credit --method oar_p`",
    needs=model_score_needs("oar_p"),
    source=OAR_SOURCE,
    explain=explain_scored,
)(_oar("oar_p"))
register(
    "oar_g",
    OARConfig,
    "OAR-G: OAR's reshaping with the influence from one backward pass (|gradient x embedding| of the "
    "answer log-prob); needs `creditlens model-credit --method oar_g`",
    needs=model_score_needs("oar_g"),
    source=OAR_SOURCE,
    explain=explain_scored,
)(_oar("oar_g"))


@dataclass(frozen=True)
class GCPOConfig(OutcomeConfig):
    """GCPO's contrastive weights: rank-percentile power law of the pointwise KL."""

    top: float = param(
        0.4, low=0.01, high=0.99, help="Top fraction of a response's tokens by divergence (0.4 in the code)"
    )
    mass: float = param(
        0.8,
        low=0.01,
        high=0.99,
        help="Share of the response's weight those top tokens carry (0.8 in the code)",
    )


def gcpo_alpha(config: GCPOConfig) -> float:
    return math.log(1.0 - config.mass) / math.log(1.0 - config.top) - 1.0


def gcpo_weights(
    delta: torch.Tensor, scored: torch.Tensor, config: GCPOConfig
) -> tuple[torch.Tensor, torch.Tensor]:
    """w: (B, T) float32 mean-one weights over the scored tokens (1 elsewhere) and d: (B, T) the pointwise
    KL estimate; delta: (B, T) log p_neg - log p_pos. Ties in d rank by position (a stable sort)."""
    diff = delta.to(torch.float32).clamp(-20.0, 20.0)
    d = (diff.exp() - diff - 1.0).clamp(-10.0, 10.0)  # (B, T)
    order = torch.where(scored, d, torch.inf).argsort(dim=1, stable=True)  # unscored last
    ranks = torch.empty_like(order).scatter_(1, order, torch.arange(1, d.shape[1] + 1).expand_as(order))
    n = scored.sum(dim=1, keepdim=True).clamp(min=1)
    u = (ranks.to(torch.float32) / n).clamp(max=1.0)
    w = torch.where(scored, u.pow(gcpo_alpha(config)), 0.0)
    w = w / w.sum(dim=1, keepdim=True).clamp(min=1e-30) * n
    return torch.where(scored, w, 1.0), d


@register(
    "gcpo",
    GCPOConfig,
    "GCPO: Z weighted by how much a negative prompt ('..., but generate the wrong answer') changes "
    "each token's log-prob (rank power law, mean one); needs `creditlens model-credit --method gcpo`",
    needs=model_score_needs("gcpo"),
    source=GCPO_SOURCE,
    explain=explain_scored,
)
def gcpo(batch: RolloutBatch, config: GCPOConfig) -> EstimatorResult:
    delta, scored = _cached(batch, "gcpo")
    weights, d = gcpo_weights(delta, scored, config)
    result = _reshape(batch, config, "gcpo", weights, ~scored.any(dim=1), delta, scored)
    result.diagnostics["divergence"] = torch.where(batch.response_mask & scored, d, 0.0)
    return result
