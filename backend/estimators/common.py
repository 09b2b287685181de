"""Pieces shared by the registered estimators: config bases with validation, outcome Z, value sources.

Config classes are frozen dataclasses; `Config.__post_init__` checks every field against the range
and choices recorded by `param(...)` and its `Literal[...]` type, raising `ValueError` that quotes
the bad value. Subclasses add fields; they inherit the check.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import fitting
from backend.estimators import functional as F
from backend.estimators.explaining import Terms, broadcast, first_of, z_from_outcome
from backend.estimators.registry import Config, EstimatorResult, param
from backend.estimators.token_helpers import fallback_message, rollout_list, scores_of
from backend.estimators.values import values_from_source

Outcome = Literal["grpo", "dr_grpo", "rloo"]
ValueSource = Literal["zero", "stored", "fitted", "prefix_tree", "mc"]


@dataclass(frozen=True)
class OutcomeConfig(Config):
    """Which sequence score, and which group-relative outcome Z, an estimator starts from."""

    outcome: Outcome = param("grpo", help="Group-relative outcome Z: grpo z-score, dr_grpo minus mean, rloo")
    channel: str = param("task", help="Reward channel whose sequence score is R")
    epsilon: float = param(1e-6, low=0.0, high=1.0, help="Added to the group std (grpo)")


@dataclass(frozen=True)
class GAEFields(Config):
    """GAE over the token rewards with a value source (docs/estimators.md section 3)."""

    value_source: ValueSource = param("zero", help="V(s_t): zero, stored, fitted probe, prefix tree, MC")
    gamma: float = param(1.0, low=0.0, high=1.0, help="Discount gamma")
    lam: float = param(0.95, low=0.0, high=1.0, help="GAE lambda")
    folds: int = param(5, low=2, high=20, help="Cross-fitting folds (by group) of the fitted value probe")
    ridge: float = param(1.0, low=0.0, high=1e6, help="Ridge penalty of the fitted value probe")

    def fits_values(self) -> bool:
        """Whether the estimator fits the value probe (on every token feature the run has)."""
        return getattr(self, "then_gae", True) and self.value_source == "fitted"

    def scope(self) -> str:
        # The fitted probe is cross-fitted over the groups of the batch: it needs the whole run.
        return fitting.fit_scope() if self.fits_values() else "group"


@dataclass(frozen=True)
class CreditConfig(GAEFields, OutcomeConfig):
    """A credit operator (section 2): weights -> token rewards r -> A = L r, or GAE over r."""

    then_gae: bool = param(False, help="Run GAE over the token rewards r with the value source, gamma, lam")


def outcome_z(batch: RolloutBatch, config: Any) -> torch.Tensor:
    """Z: (B,) float32 from the config's outcome and channel."""
    return F.outcome_scores(scores_of(batch, config.channel), batch.group_ids, config.outcome, config.epsilon)


def values_for(batch: RolloutBatch, config: Any, z: torch.Tensor) -> tuple[torch.Tensor, dict]:
    """V(s_t): (B, T) float32 in Z units from `config.value_source`, plus diagnostics."""
    return values_from_source(batch, config, z)


def finish_credit(
    batch: RolloutBatch, config: Any, z: torch.Tensor, weights: torch.Tensor, extra: dict | None = None
) -> EstimatorResult:
    """Redistribute Z by `weights` (section 2), optionally run GAE over r, and collect diagnostics."""
    mask = batch.response_mask
    _, r, fallback = F.redistribute(z, weights, mask)
    diagnostics: dict[str, Any] = {
        "weights": torch.where(mask, weights.to(torch.float32), 0.0),
        "fallback": fallback_message(batch, fallback),
        "fallback_rollouts": rollout_list(batch, fallback),
    }
    diagnostics.update(extra or {})
    return finish_rewards(batch, config, z, r, diagnostics)


def finish_rewards(
    batch: RolloutBatch, config: Any, z: torch.Tensor, r: torch.Tensor, diagnostics: dict | None = None
) -> EstimatorResult:
    """From token rewards r (summing to Z) to advantages: `A = L r`, or GAE over r when `then_gae`."""
    mask = batch.response_mask
    r = torch.where(mask, r, 0.0)
    diagnostics = {"Z": z, "r": r, **(diagnostics or {})}
    if getattr(config, "then_gae", False):
        values, vdiag = values_for(batch, config, z)
        adv, returns = F.compute_gae(r, values, mask, config.gamma, config.lam)
        for key, value in vdiag.items():  # keep the credit operator's own fallback note
            diagnostics[key if key not in diagnostics or diagnostics[key] is None else f"value_{key}"] = value
        diagnostics.update(values=values, returns=returns)
    else:
        adv = r * mask.sum(dim=1, keepdim=True).to(r.dtype)  # (B, T) A = L r
    return EstimatorResult(advantages=torch.where(mask, adv, 0.0), diagnostics=diagnostics)


def gae_steps(v: Terms) -> list[str]:
    """GAE over the token rewards r with values V (`then_gae`; gae itself, with VAPO's options)."""
    V, r, cfg = v.at("values"), v.at("r"), v.cfg
    if V is None or r is None:
        return []
    V_next = v.at("values", v.t + 1) or 0.0
    gamma = float(cfg.get("gamma", 1.0))
    lam = v.seq.get("lam_actor")  # gae's per-response lambda (VAPO's length-adaptive option)
    lam = float(cfg.get("lam", 1.0)) if lam is None else lam
    delta = r + gamma * V_next - V
    A_next = v.at("advantage", v.t + 1) or 0.0
    lines = [
        f"V(s_t) from {v.notes.get('value_source', '?')}: V(s_t) = {V:.4g}, V(s_t+1) = {V_next:.4g}",
        f"δ_t = r_t + γ V(s_t+1) − V(s_t) = {r:.4g} + {gamma:g} × {V_next:.4g} − {V:.4g} = {delta:.4g}",
        f"A_t = δ_t + γλ A_t+1 = {delta:.4g} + {gamma * lam:.3g} × {A_next:.4g} = {v.A:.4g}",
    ]
    if cfg.get("lam_mode") == "length_adaptive":
        lines.append(
            f"λ = 1 − 1/(α L) = 1 − 1/({float(cfg.get('alpha', 0)):g} × {len(v.tok['advantage'])})"
            f" = {lam:.4g} (VAPO, at least 0)"
        )
    critic_lam, G = v.notes.get("lam_critic"), v.at("returns")
    if critic_lam is not None and G is not None:
        lines.append(
            f"value target (decoupled, λ_critic = {critic_lam:g}): returns_t = {G:.4g}; "
            "A_t keeps the actor's λ"
        )
    return lines


def weighted(v: Terms) -> list[str]:
    """A_t = L r_t with r_t = Z w_t / Σw (`finish_credit`): Z spread by the weights."""
    w, r = v.at("weights"), v.at("r")
    if w is None or r is None or "Z" not in v.seq:
        return []
    weights = [x for x in v.tok["weights"] if x is not None]
    mean_w = sum(weights) / max(len(weights), 1)
    if mean_w > 0:
        return [f"A_t = Z · w_t / mean w = {v.seq['Z']:.4g} × {w:.4g} / {mean_w:.4g} = {v.A:.4g}"]
    return [f"all weights 0: uniform fallback, A_t = Z = {v.A:.4g}"]


def token_rewards(v: Terms) -> list[str]:
    """A_t = L r_t from token rewards r (`finish_rewards`), with a learned reward's φ_t and features."""
    r = v.at("r")
    if r is None or "Z" not in v.seq:
        return []
    L = len(v.tok["advantage"])
    extra, lines = "", []
    for name in ("phi", "g", "key_score"):
        if v.at(name) is not None:
            extra = f"   ({name}_t = {v.at(name):.4g})"
    if v.at("phi") is not None:
        phi_sum = sum(x for x in v.tok["phi"] if x is not None)
        lines.append(
            f"r_t = φ_t + (Z − Σφ) / L = {v.at('phi'):.4g} + ({v.seq['Z']:.4g} − {phi_sum:.4g})"
            f" / {L} = {r:.4g}"
        )
        parts = sorted(
            ((k[8:], v.at(k)) for k in v.tok if k.startswith("feature:") and v.at(k) is not None),
            key=lambda kv: -abs(kv[1]),
        )[:3]
        if parts:
            lines.append(
                "largest feature contributions to φ_t: " + ", ".join(f"{n} {x:+.3g}" for n, x in parts)
            )
    return [*lines, f"A_t = L · r_t = {L} × {r:.4g} = {v.A:.4g}{extra}"]


def explain_credit(v: Terms) -> list[str]:
    """The derivation of `finish_credit`'s methods: Z from the outcome, spread over the tokens by the
    weights (A_t = L r_t), or GAE over r (`then_gae`)."""
    return [*z_from_outcome(v), *first_of(v, gae_steps, weighted, token_rewards, broadcast)]


def explain_rewards(v: Terms) -> list[str]:
    """The derivation of `finish_rewards`'s methods: Z from the outcome, token rewards r, A_t = L r_t or
    GAE over r."""
    return [*z_from_outcome(v), *first_of(v, gae_steps, token_rewards, broadcast)]
