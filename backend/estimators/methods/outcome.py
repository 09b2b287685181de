"""Group-relative outcome estimators (docs/estimators.md section 1): grpo, dr_grpo, rloo, maxrl (Z
broadcast to every real token).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from backend.core.batch import RolloutBatch
from backend.estimators import functional as F
from backend.estimators import masked
from backend.estimators.common import Config
from backend.estimators.explaining import Terms, broadcast, z_from_outcome
from backend.estimators.registry import EstimatorResult, param, register
from backend.estimators.token_helpers import scores_of


@dataclass(frozen=True)
class GRPOConfig(Config):
    """GRPO: Z_i = (R_i - mean_G R) / (std_G R + eps), broadcast to every real token."""

    channel: str = param("task", help="Reward channel whose sequence score is R")
    epsilon: float = param(1e-6, low=0.0, high=1.0, help="Added to the group std")
    norm_by_std: bool = param(True, help="Divide by the group std (false: Dr. GRPO)")

    def reads(self) -> tuple[str, ...]:
        return ()  # the scores only


@dataclass(frozen=True)
class PlainOutcomeConfig(Config):
    """An outcome without a std: Dr. GRPO or RLOO, broadcast to every real token."""

    channel: str = param("task", help="Reward channel whose sequence score is R")

    def reads(self) -> tuple[str, ...]:
        return ()  # the scores only


def _result(batch: RolloutBatch, z) -> EstimatorResult:
    return EstimatorResult(masked.broadcast(z, batch.response_mask), {"Z": z})


def explain_outcome(v: Terms) -> list[str]:
    """Z from the outcome, on every token."""
    return [*z_from_outcome(v), *broadcast(v)]


def explain_dr_grpo(v: Terms) -> list[str]:
    """Z = R − mean_G, on every token."""
    return [*z_from_outcome(v, "dr_grpo"), *broadcast(v)]


def explain_rloo(v: Terms) -> list[str]:
    """Z = R − the mean of the others, on every token."""
    return [*z_from_outcome(v, "rloo"), *broadcast(v)]


@register(
    "grpo",
    GRPOConfig,
    "GRPO: group z-scored outcome broadcast to every token",
    family="outcome",
    explain=explain_outcome,
)
def grpo(batch: RolloutBatch, config: GRPOConfig) -> EstimatorResult:
    outcome = "grpo" if config.norm_by_std else "dr_grpo"
    return _result(
        batch, F.outcome_scores(scores_of(batch, config.channel), batch.group_ids, outcome, config.epsilon)
    )


@register(
    "dr_grpo",
    PlainOutcomeConfig,
    "Dr. GRPO: outcome minus the group mean, broadcast",
    family="outcome",
    explain=explain_dr_grpo,
)
def dr_grpo(batch: RolloutBatch, config: PlainOutcomeConfig) -> EstimatorResult:
    return _result(batch, F.outcome_scores(scores_of(batch, config.channel), batch.group_ids, "dr_grpo"))


@register(
    "rloo",
    PlainOutcomeConfig,
    "RLOO: outcome minus the mean of the other responses, broadcast",
    family="outcome",
    explain=explain_rloo,
)
def rloo(batch: RolloutBatch, config: PlainOutcomeConfig) -> EstimatorResult:
    return _result(batch, F.outcome_scores(scores_of(batch, config.channel), batch.group_ids, "rloo"))


MAXRL_SOURCE = (
    "MaxRL, Tajwar et al., 'Maximum Likelihood Reinforcement Learning' (arXiv 2602.02710); "
    "official code Zanette-Labs/MaxRL @ 8bafaa9cf04c9d68511afd4c2cff75afbc8dc3a2 "
    "(site/code.html: the one-line patch of verl compute_grpo_outcome_advantage); "
    "cross-checked with PrimeIntellect-ai/prime-rl @ 559b44772e471d1538537b8805cc77f3824a5e64 "
    "(src/prime_rl/orchestrator/algo/max_rl.py, nonpositive_mean='zero', epsilon=0)"
)


@dataclass(frozen=True)
class MaxRLConfig(Config):
    """MaxRL: Z_i = (R_i - mean_G R) / (mean_G R + eps), broadcast to every real token."""

    channel: str = param("task", help="Reward channel whose sequence score is R (0/1 rewards)")
    epsilon: float = param(1e-6, low=0.0, high=1.0, help="Added to the group mean (official code: 1e-6)")
    nonpositive_mean: Literal["divide", "zero"] = param(
        "divide", help="A group with mean <= 0: divide anyway (official code) or Z = 0 (paper, prime-rl)"
    )

    def reads(self) -> tuple[str, ...]:
        return ()  # the scores only


def explain_maxrl(v: Terms) -> list[str]:
    """Z from the outcome divided by the pass rate, on every token."""
    return [*z_from_outcome(v, "maxrl"), *broadcast(v)]


@register(
    "maxrl",
    MaxRLConfig,
    "MaxRL: outcome minus the group mean, divided by the group mean (pass rate)",
    family="outcome",
    source=MAXRL_SOURCE,
    explain=explain_maxrl,
)
def maxrl(batch: RolloutBatch, config: MaxRLConfig) -> EstimatorResult:
    z, mean = F.maxrl_scores(
        scores_of(batch, config.channel), batch.group_ids, config.epsilon, config.nonpositive_mean
    )
    return EstimatorResult(masked.broadcast(z, batch.response_mask), {"Z": z, "pass_rate": mean})
