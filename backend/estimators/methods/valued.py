"""Estimators built on values of prefixes: gae (section 3), prefix_tree (section 4), suffix_mc (section 5)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from backend.core.batch import BatchError, RolloutBatch
from backend.estimators import functional as F
from backend.estimators import masked
from backend.estimators.common import GAEFields, OutcomeConfig, explain_rewards, outcome_z, values_for
from backend.estimators.explaining import Terms, broadcast, first_of, z_from_outcome
from backend.estimators.registry import MC_NEEDS, EstimatorResult, param, register
from backend.estimators.token_helpers import fallback_message, rollout_list, scores_of, token_positions
from backend.estimators.tree import build_prefix_tree

VAPO_SOURCE = (
    "VAPO, Yue et al., arXiv 2504.05118 (length-adaptive GAE: lambda_policy = 1 - 1/(alpha l), "
    "alpha = 0.05; decoupled GAE) and VC-PPO, Yuan et al., arXiv 2503.01491 (decoupled GAE: "
    "lambda_critic = 1 for value targets, lambda_actor < 1 for advantages); no official code "
    "published: checked against the papers' formulas"
)


@dataclass(frozen=True)
class GAEConfig(GAEFields, OutcomeConfig):
    """GAE on the terminal reward r_L = Z with a value source V(s_t), with VAPO / VC-PPO's lambda options."""

    value_source: str = param(
        "fitted",
        choices=("zero", "stored", "fitted", "prefix_tree", "mc"),
        help="V(s_t): zero, stored critic, fitted probe, prefix_tree, mc",
    )
    lam_mode: Literal["fixed", "length_adaptive"] = param(
        "fixed",
        help="fixed: lam for every response; length_adaptive (VAPO): lam_i = 1 - 1/(alpha L_i), "
        "clamped at 0 for L_i < 1/alpha",
    )
    alpha: float = param(0.05, low=1e-4, high=1.0, help="VAPO's alpha of the length-adaptive lambda")
    decoupled: bool = param(
        False,
        help="VC-PPO/VAPO decoupled GAE: value targets (returns) use critic_lam, "
        "advantages keep the actor's lambda (the advantage is unchanged)",
    )
    critic_lam: float = param(1.0, low=0.0, high=1.0, help="Lambda of the value targets when decoupled")


def actor_lambdas(config: GAEConfig, mask: torch.Tensor) -> float | torch.Tensor:
    """The advantage's lambda: `config.lam`, or VAPO's per response `max(0, 1 - 1 / (alpha L_i))`: (B,)."""
    if config.lam_mode == "fixed":
        return config.lam
    L = mask.sum(dim=1).to(torch.float64).clamp(min=1)  # (B,)
    return (1.0 - 1.0 / (config.alpha * L)).clamp(min=0.0)

    def reads(self) -> tuple[str, ...] | None:
        # the fitted probe's features use whatever the run has (token text, entropies, logprobs)
        return {"zero": (), "stored": ("values",), "prefix_tree": (), "mc": MC_NEEDS}.get(self.value_source)


@register(
    "gae",
    GAEConfig,
    "GAE on the terminal outcome with a value source (zero, stored, fitted, tree, MC); options: VAPO's "
    "length-adaptive lambda and VC-PPO's decoupled critic lambda (changes the returns, not A)",
    family="value",
    source=VAPO_SOURCE,
    explain=explain_rewards,
)
def gae(batch: RolloutBatch, config: GAEConfig) -> EstimatorResult:
    """A: (B, T) GAE advantages with the actor's lambda. Diagnostics: Z, r, values, returns (the value
    targets: A + V, or with `decoupled` GAE(critic_lam) + V), lam_actor (B,), lam_critic."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    t, L = token_positions(batch)
    r = torch.where((t == L) & mask, z[:, None], 0.0)  # (B, T) terminal reward
    values, diag = values_for(batch, config, z)
    lam = actor_lambdas(config, mask)
    adv, returns = F.compute_gae(r, values, mask, config.gamma, lam)
    extra = {}
    if config.decoupled:  # only the value targets change: A keeps the actor's lambda
        returns = F.compute_gae(r, values, mask, config.gamma, config.critic_lam)[1]
        extra["lam_critic"] = float(config.critic_lam)
    lam_rows = (
        lam.to(torch.float32)
        if isinstance(lam, torch.Tensor)
        else torch.full((batch.B,), float(lam), dtype=torch.float32, device=batch.device)
    )
    return EstimatorResult(
        adv, {"Z": z, "r": r, "values": values, "returns": returns, "lam_actor": lam_rows, **extra, **diag}
    )


@dataclass(frozen=True)
class PrefixTreeConfig(OutcomeConfig):
    """TEMPO/P2T-style: A = Z + eta 1[branch] (V(s_{t+1}) - V(s_t)) over the group's prefix tree."""

    eta: float = param(1.0, low=0.0, high=10.0, help="Weight of the tree TD term at branch points")
    nodes: bool = param(False, help="Also return the node tables (for drawing the tree; ~4x slower)")

    def reads(self) -> tuple[str, ...]:
        return ()  # token ids and scores


def branch_lines(v: Terms) -> list[str]:
    """At a branch point of the tree the TD step of the values; elsewhere Z."""
    V, Va = v.at("values"), v.at("values_after")
    if "values_after" not in v.tok or V is None:
        return []
    if v.at("branch"):
        eta, Z = float(v.cfg.get("eta", 1.0)), v.seq.get("Z") or 0.0
        return [
            f"branch point: A_t = Z + η (V(s_t+1) − V(s_t)) = {Z:.4g} + {eta:g} × ({Va:.4g} − "
            f"{V:.4g}) = {v.A:.4g}"
        ]
    return [f"no branch at t: A_t = Z = {v.A:.4g}"]


def explain_prefix_tree(v: Terms) -> list[str]:
    return [*z_from_outcome(v), *first_of(v, branch_lines, broadcast)]


@register(
    "prefix_tree",
    PrefixTreeConfig,
    "Prefix tree of the group: TD credit at branch points, GRPO elsewhere",
    family="tree",
    explain=explain_prefix_tree,
)
def prefix_tree(batch: RolloutBatch, config: PrefixTreeConfig) -> EstimatorResult:
    mask = batch.response_mask
    z = outcome_z(batch, config)
    tree = build_prefix_tree(batch.token_ids, mask, batch.group_ids, z, with_nodes=config.nodes)
    td = torch.where(tree.branch, tree.v_after - tree.v_before, 0.0)
    adv = torch.where(mask, z[:, None] + config.eta * td, 0.0)
    diag = {
        "Z": z,
        "values": tree.v_before,
        "values_after": tree.v_after,
        "branch": tree.branch,
        "subtree_size": tree.count_before,
    }
    if config.nodes:
        diag["tree"] = {
            "group": tree.node_group,
            "parent": tree.node_parent,
            "depth": tree.node_depth,
            "value": tree.node_value,
            "count": tree.node_count,
            "branch": tree.node_branch,
            "token_node": tree.token_node,
        }
    return EstimatorResult(adv, diag)


@dataclass(frozen=True)
class SuffixMCConfig(OutcomeConfig):
    """VinePPO-style Monte Carlo: A on [t_k, t_{k+1}) = V(s_{t_{k+1}}) - V(s_{t_k}) (in Z units)."""


def resampled_lines(v: Terms) -> list[str]:
    """The Monte Carlo values around t (`terms["mc"]`, from the store) and their difference."""
    if v.at("values") is None or "mc_mask" not in v.tok:
        return []
    valued = {m["pos"]: m for m in v.terms.get("mc", [])}
    before = [p for p in valued if p <= v.t]
    after = [p for p in valued if p > v.t]
    lines = []
    if before:
        m = valued[max(before)]
        lines.append(
            f"V̂(s_{m['pos']}) = {m['value']:.4g} ± {m['stderr']:.2g} (reward units, "
            f"{m['n']} sampled suffixes)"
        )
    else:
        lines.append("before the first resampled position: V̂ = the group's mean reward")
    if after:
        m = valued[min(after)]
        lines.append(f"V̂(s_{m['pos']}) = {m['value']:.4g} ± {m['stderr']:.2g} ({m['n']} suffixes)")
    else:
        lines.append(f"after the last resampled position: the outcome R = {v.seq.get('R')}")
    scale, cur, nxt = v.seq.get("scale"), v.at("v_current"), v.at("v_next")
    if None in (scale, cur, nxt):
        lines.append(f"A_t = scale · (V̂ next − V̂ current) = {v.A:.4g}   (scale maps rewards to Z units)")
    else:
        lines.append(
            f"A_t = scale · (V̂ next − V̂ current) = {scale:.4g} × ({nxt:.4g} − {cur:.4g}) = {v.A:.4g}   "
            "(scale maps rewards to Z units)"
        )
    return lines


def explain_suffix_mc(v: Terms) -> list[str]:
    return [*z_from_outcome(v), *first_of(v, resampled_lines, broadcast)]


@register(
    "suffix_mc",
    SuffixMCConfig,
    "Monte Carlo values from suffix resampling (VinePPO-style)",
    needs=MC_NEEDS,
    family="value",
    explain=explain_suffix_mc,
)
def suffix_mc(batch: RolloutBatch, config: SuffixMCConfig) -> EstimatorResult:
    """Segments between valued positions get the value difference. The segment before the first valued
    position starts at the empty prefix, valued at the group mean reward; the last segment ends at the
    observed outcome R_i. Differences are mapped to Z units by the response's outcome scale, so a
    rollout without resampled positions gets A = scale (R - mean_G R), i.e. Z for grpo and dr_grpo
    (broadcast; listed in the diagnostics)."""
    mask = batch.response_mask
    mc, mc_mask = batch.extras.get("mc_values"), batch.extras.get("mc_mask")
    if mc is None or mc_mask is None or mc.dim() != 2 or not bool(((mc_mask > 0.5) & mask).any()):
        raise BatchError(
            "suffix_mc needs resampling results (extras mc_values/mc_mask) and this run has "
            "none; run `creditlens resample --run RUN --rollout ID --suggest entropy:5` first"
        )
    R = scores_of(batch, config.channel)
    center, scale = F.outcome_center_scale(R, batch.group_ids, config.outcome, config.epsilon)
    index, n_groups = masked.group_index(batch.group_ids)
    root = masked.group_mean(R, index, n_groups)  # V(empty prefix) in reward units
    valued = (mc_mask > 0.5) & mask
    v = torch.nan_to_num(mc.to(torch.float32))
    R_known = torch.nan_to_num(R)  # a missing score has scale 0: its advantage is 0 whatever this is
    v_cur, v_next = F.segment_values(v, valued, root, R_known)  # (B, T) each
    adv = torch.where(mask, scale[:, None] * (v_next - v_cur), 0.0)
    missing = mask.any(1) & ~valued.any(1)
    z = outcome_z(batch, config)
    values = torch.where(mask, scale[:, None] * (v_cur - center[:, None]), 0.0)  # (B, T) Z units
    return EstimatorResult(
        adv,
        {
            "Z": z,
            "values": values,
            "mc_mask": valued,
            "scale": scale.to(torch.float32),  # (B,) reward units -> Z units, printed by the derivation
            "v_current": torch.where(mask, v_cur, 0.0),  # (B, T) reward units
            "v_next": torch.where(mask, v_next, 0.0),  # (B, T) reward units
            "fallback": fallback_message(batch, missing, "no resampled positions"),
            "fallback_rollouts": rollout_list(batch, missing),
        },
    )
