"""Block credit (MPO-style multi-token actions) and value-anchored process credit (VGPO-inspired).

`block_mean` treats K consecutive tokens (or one reasoning step) as one action: every token of a block gets
the block's mean base advantage. `value_anchored` is our token-level construction after VGPO's abstract:
process values from a value source plus an absolute reward anchor that survives a group without diversity.
Neither is the named paper's method; each description says where it departs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import functional as F
from backend.estimators import masked
from backend.estimators.common import GAEFields, OutcomeConfig, outcome_z, values_for
from backend.estimators.explaining import Terms, broadcast, first_of, scaled_base, z_from_outcome
from backend.estimators.methods.modifiers import ModifierConfig, base_advantages
from backend.estimators.registry import EstimatorResult, param, register
from backend.estimators.token_helpers import scores_of, step_ends, token_positions

MPO_PAPER = (
    "Xu et al., 'Beyond Token-Level Policy Gradients for Complex Reasoning with Large Language "
    "Models' (MPO), arXiv 2602.14386; code not released ('upon acceptance'): only the abstract's "
    "block idea is used"
)
VGPO_PAPER = (
    "Shao et al., 'Anchoring Values in Temporal and Group Dimensions for Flow Matching Model "
    "Alignment' (VGPO), arXiv 2512.12387, for image flow matching; only its abstract's two "
    "ideas are used"
)


@dataclass(frozen=True)
class BlockMeanConfig(ModifierConfig):
    """Block credit: the base advantage averaged over blocks of K tokens or over reasoning steps."""

    base: str = param(
        "prefix_tree",
        kind="base_estimator",
        help="Base estimator whose token advantages are pooled per block",
    )
    blocks: Literal["fixed", "steps"] = param(
        "fixed", help="fixed: K consecutive real tokens per block; steps: a block ends at each step end"
    )
    k: int = param(4, low=1, high=4096, help="Tokens per block (fixed)")
    pattern: str = param(
        r"\n", kind="regex", help="Regex ending a step (steps); the last token always ends one"
    )


def block_index(batch: RolloutBatch, config: BlockMeanConfig) -> tuple[torch.Tensor, str | None]:
    """(B, T) int64 block number of each real token within its response (0-based; -1 on padding), and a
    note when step ends are unknown. Positions count real tokens only, so mid-sequence holes are skipped."""
    mask = batch.response_mask
    pos = masked.positions(mask).clamp(min=0)  # (B, T) 0-based among real tokens
    note = None
    if config.blocks == "fixed":
        block = torch.div(pos, config.k, rounding_mode="floor")
    else:
        ends, note = step_ends(batch, config.pattern)
        ends = ends & mask
        block = ends.to(torch.int64).cumsum(dim=1) - ends.to(torch.int64)  # ends closed before t
    return torch.where(mask, block, -1), note


def block_average(values: torch.Tensor, block: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B, T) mean of `values` over the real tokens of each (row, block); 0 on padding."""
    B, T = mask.shape
    key = (torch.arange(B, device=mask.device)[:, None] * T + block.clamp(min=0))[mask]  # (N,)
    total = torch.zeros(B * T, dtype=torch.float64, device=mask.device).index_add_(
        0, key, values[mask].to(torch.float64)
    )
    count = torch.zeros(B * T, dtype=torch.float64, device=mask.device).index_add_(
        0, key, torch.ones_like(key, dtype=torch.float64)
    )
    out = torch.zeros((B, T), dtype=torch.float32, device=mask.device)
    out[mask] = (total[key] / count[key]).to(torch.float32)
    return out


def block_lines(v: Terms) -> list[str]:
    """A_t = the mean of the base advantage over t's block."""
    base, block = v.at("base"), v.at("block")
    if base is None or "block" not in v.tok:
        return []
    members = [i for i, b in enumerate(v.tok["block"]) if b == block]
    values = [v.tok["base"][i] or 0.0 for i in members]
    return [
        f"block {block:.0f} = tokens {members[0]}–{members[-1]}: A_t = mean of base over the block = "
        f"{sum(values):.4g} / {len(values)} = {v.A:.4g}   (base_t = {base:.4g})"
    ]


def explain_block(v: Terms) -> list[str]:
    return first_of(v, block_lines, scaled_base)


@register(
    "block_mean",
    BlockMeanConfig,
    "MPO-style blocks (our construction): K consecutive tokens (or one reasoning step) form one action "
    "and share the mean of the base estimator's advantages over the block. With an outcome-only base "
    "(grpo) this is broadcast: MPO's block-level importance ratio lives in the loss, not in A. Not the "
    "MPO paper's method (its code is unreleased)",
    family="modifier",
    source="",
    explain=explain_block,
)
def block_mean(batch: RolloutBatch, config: BlockMeanConfig) -> EstimatorResult:
    """A: (B, T) = mean of base A over the token's block. Diagnostics: base (B, T), block (B, T) index."""
    mask = batch.response_mask
    base = base_advantages(batch, config)
    block, note = block_index(batch, config)
    adv = block_average(base, block, mask)
    diag = {"base": base, "block": torch.where(mask, block, 0).to(torch.float32), "paper": MPO_PAPER}
    if note:
        diag["note"] = note
    return EstimatorResult(adv, diag)


@dataclass(frozen=True)
class ValueAnchoredConfig(GAEFields, OutcomeConfig):
    """Process values (temporal: GAE on the terminal Z, with gamma = lam = 1 A = Z - V(s_t)) plus an absolute
    anchor w_abs (R - anchor) on every token."""

    value_source: str = param(
        "prefix_tree",
        choices=("zero", "stored", "fitted", "prefix_tree", "mc"),
        help="V(s_t) in Z units: prefix_tree (the group's shared prefixes), fitted",
    )
    lam: float = param(1.0, low=0.0, high=1.0, help="GAE lambda of the temporal part (1: Z - V(s_t))")
    w_abs: float = param(
        0.1, low=0.0, high=10.0, help="Weight of the absolute term R - anchor (a signal in flat groups)"
    )
    anchor: float = param(
        0.5,
        low=-1e9,
        high=1e9,
        help="Reward the absolute term is measured from (0.5: midpoint of a 0/1 verifier)",
    )


def explain_value_anchored(v: Terms) -> list[str]:
    """Z from the outcome; A_t = GAE of Z with process values + w_abs (R − anchor)."""
    return [*z_from_outcome(v), *first_of(v, anchored_lines, broadcast)]


def anchored_lines(v: Terms) -> list[str]:
    V, cfg = v.at("values"), v.cfg
    if V is None or "temporal" not in v.tok:
        return []
    absolute = v.seq.get("absolute") or 0.0
    temporal = v.at("temporal") or 0.0
    lines = [f"V(s_t) from {v.notes.get('value_source', '?')}: V(s_t) = {V:.4g}"]
    if float(cfg.get("lam", 1.0)) == 1.0 and float(cfg.get("gamma", 1.0)) == 1.0:
        lines.append(
            f"temporal (GAE, γ = λ = 1): Z − V(s_t) = {v.seq.get('Z') or 0.0:.4g} − {V:.4g} = {temporal:.4g}"
        )
    else:
        lines.append(f"temporal (GAE, γ = {cfg.get('gamma')}, λ = {cfg.get('lam')}) = {temporal:.4g}")
    w_abs, anchor, R = float(cfg.get("w_abs", 0.1)), float(cfg.get("anchor", 0.5)), v.seq.get("R")
    absolute_term = (
        f"{w_abs:g} × ({R:.4g} − {anchor:g})" if R is not None else f"{absolute:.4g} (R: no score)"
    )
    lines.append(f"A_t = temporal + w_abs (R − anchor) = {temporal:.4g} + {absolute_term} = {v.A:.4g}")
    return lines


@register(
    "value_anchored",
    ValueAnchoredConfig,
    "VGPO-inspired (our construction): A = GAE of the terminal Z with process values V(s_t) (the "
    "group's prefix tree by default; gamma = lam = 1 gives Z - V(s_t)) + w_abs (R - anchor), an "
    "absolute term that does not vanish when every response of a group scores the same. VGPO itself is "
    "for image flow matching (temporal cumulative rewards over denoising steps, adaptive dual "
    "advantage estimation); this is not its method",
    family="value",
    explain=explain_value_anchored,
)
def value_anchored(batch: RolloutBatch, config: ValueAnchoredConfig) -> EstimatorResult:
    """A: (B, T); the temporal part is `gae` with the same values, gamma and lam.
    Diagnostics: Z (B,), values (B, T), temporal (B, T), returns (B, T), absolute (B,) w_abs (R - anchor)."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    t, L = token_positions(batch)
    r = torch.where((t == L) & mask, z[:, None], 0.0)  # (B, T) terminal reward
    values, diag = values_for(batch, config, z)
    temporal, returns = F.compute_gae(r, values, mask, config.gamma, config.lam)
    R = scores_of(batch, config.channel)
    absolute = torch.where(torch.isnan(R), 0.0, config.w_abs * (R - config.anchor))  # (B,) 0 if unscored
    adv = torch.where(mask, temporal + absolute[:, None], 0.0)
    return EstimatorResult(
        adv,
        {
            "Z": z,
            "values": values,
            "temporal": temporal,
            "returns": returns,
            "absolute": absolute,
            "paper": VGPO_PAPER,
            **diag,
        },
    )
