"""Token-level modifiers and the loss-aggregation view (docs/estimators.md section 7).

Modifiers take a base estimator's advantages (`base`, any registered name, run with its defaults
plus this config's `channel`/`outcome` where the base has them) and reshape them per token.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import masked, registry
from backend.estimators.common import Config, OutcomeConfig
from backend.estimators.explaining import every_term, scaled_base
from backend.estimators.methods.credit import response_high_entropy_mask
from backend.estimators.registry import EstimatorResult, param, register
from backend.estimators.token_helpers import masked_entropies, need, scores_of


@dataclass(frozen=True)
class ModifierConfig(OutcomeConfig):
    """A modifier applied on top of a base estimator."""

    base: str = param(
        "grpo",
        kind="base_estimator",
        help="Base estimator whose advantages are modified (any registered non-modifier)",
    )

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


GTPO_SOURCE = (
    "Tan et al., 'GTPO and GRPO-S: Token and Sequence-Level Reward Shaping with Policy Entropy', "
    "arXiv 2508.04349 (Eq. 3, 5, 6); no official code published: checked against the paper's "
    "formulas"
)
STARE_SOURCE = (
    "STARE (arXiv 2606.19236), official code hp-luo/STARE @ "
    "bffb9e79c96c318340e35402993d60548d864315 "
    "(verl/trainer/ppo/core_algos.py: compute_stare_token_weights, STAREController)"
)


@dataclass(frozen=True)
class GTPOConfig(Config):
    """GTPO (arXiv 2508.04349): entropy-shaped token rewards, O+ and O- normalized separately per group."""

    channel: str = param("task", help="Reward channel whose sequence score is R")
    alpha1: float = param(1.0, low=0.0, high=10.0, help="alpha_1: weight of the outcome reward r_i = +-1")
    alpha2: float = param(0.1, low=0.0, high=10.0, help="alpha_2: weight of the entropy share")
    correct_above: float = param(0.0, low=-1e9, high=1e9, help="A response is correct (O+) when R > this")
    epsilon: float = param(1e-6, low=0.0, high=1.0, help="Added to the std of each set's shaped rewards")
    entropy_floor: float = param(1e-6, low=1e-12, high=1.0, help="1/H uses max(H, floor) (incorrect set)")

    def scope(self) -> str:
        return "group"  # shares and the O+/O- normalization are within the group


def _per_position_share(
    values: torch.Tensor, rows: torch.Tensor, gidx: torch.Tensor, t0: torch.Tensor, n_groups: int, T: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Share of `values` (B, T) among the tokens of `rows` (B, T) bool with the same group and position t0,
    and the number of such tokens (d_t, h_t). Both (B, T); 0 outside `rows`."""
    key = (gidx[:, None] * T + t0)[rows]  # (K,) one slot per (group, position)
    total = torch.zeros(n_groups * T, dtype=values.dtype, device=values.device).index_add_(
        0, key, values[rows]
    )
    count = torch.zeros(n_groups * T, dtype=values.dtype, device=values.device).index_add_(
        0, key, torch.ones_like(values[rows])
    )
    share = torch.zeros_like(values)
    alive = torch.zeros_like(values)
    tot = total[key]
    share[rows] = torch.where(
        tot > 0, values[rows] / tot.clamp(min=torch.finfo(values.dtype).tiny), 1.0 / count[key]
    )  # all-zero entropies at t: equal shares
    alive[rows] = count[key]
    return share, alive


def _group_standardize(
    x: torch.Tensor, mask: torch.Tensor, gidx: torch.Tensor, n_groups: int, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x - mean_g) / (std_g + eps) over every real token of each group (std unbiased; a single token or a
    constant set gives 0). Returns the standardized (B, T) and the per-group mean and std (G,)."""
    x64 = torch.where(mask, x.to(torch.float64), 0.0)
    n = masked.group_sum(mask.sum(1).to(torch.float64), gidx, n_groups)  # tokens per group
    mean = masked.group_sum(x64.sum(1), gidx, n_groups) / n.clamp(min=1)
    dev = torch.where(mask, x64 - mean[gidx][:, None], 0.0)
    var = masked.group_sum((dev**2).sum(1), gidx, n_groups) / (n - 1).clamp(min=1)
    std = var.sqrt()
    out = torch.where(std[gidx][:, None] > 0, dev / (std[gidx][:, None] + eps), 0.0)
    return torch.where(mask, out, 0.0).to(torch.float32), mean.to(torch.float32), std.to(torch.float32)


@register(
    "gtpo",
    GTPOConfig,
    "GTPO (Tan et al., arXiv 2508.04349, Eq. 3/5/6): correct responses get "
    "r = a1 + a2 d_t H / sum_k H_k,t "
    "(entropy share across the group's correct sequences alive at position t), incorrect ones "
    "r = -a1 - a2 h_t (1/H) / sum_k (1/H_k,t); the shaped rewards of each set, 0 on the other set's "
    "tokens, are z-scored over the group's tokens (our reading of Eq. 6, which keeps correct > 0 > "
    "incorrect)",
    needs=("entropies",),
    family="modifier",
    source=GTPO_SOURCE,
    explain=every_term,
)
def gtpo(batch: RolloutBatch, config: GTPOConfig) -> EstimatorResult:
    """Positions t are 1-based among each response's real tokens; d_t (h_t) counts the group's correct
    (incorrect) responses with at least t tokens. Eq. 6 reading: R+ = {r+_{i,t}} over all real tokens of the
    group with r+ = 0 on incorrect responses' tokens (Eq. 3 defines it so),
    A = (r+ - mean R+) / (std R+ + eps)
    on correct tokens; likewise R- on incorrect tokens. A: (B, T).

    Diagnostics: R (B,), correct (B,) bool, shaped_reward (B, T) r~, entropy_share (B, T) (H share in O+,
    1/H share in O-), alive (B, T) d_t or h_t, set_mean / set_std (B,) of the set each response is in."""
    mask = batch.response_mask
    R = scores_of(batch, config.channel)
    correct = R > config.correct_above  # (B,)
    H = masked_entropies(batch)
    gidx, n_groups = masked.group_index(batch.group_ids)
    t0 = masked.positions(mask).clamp(min=0)  # (B, T) 0-based position among real tokens
    T = mask.shape[1]
    pos_rows = mask & correct[:, None]
    neg_rows = mask & ~correct[:, None]
    share_pos, d_t = _per_position_share(H, pos_rows, gidx, t0, n_groups, T)
    inv = 1.0 / H.clamp(min=config.entropy_floor)
    share_neg, h_t = _per_position_share(inv, neg_rows, gidx, t0, n_groups, T)
    r_pos = torch.where(pos_rows, config.alpha1 + config.alpha2 * share_pos * d_t, 0.0)  # Eq. 3
    r_neg = torch.where(neg_rows, -config.alpha1 - config.alpha2 * share_neg * h_t, 0.0)  # Eq. 5
    a_pos, mean_pos, std_pos = _group_standardize(r_pos, mask, gidx, n_groups, config.epsilon)  # Eq. 6
    a_neg, mean_neg, std_neg = _group_standardize(r_neg, mask, gidx, n_groups, config.epsilon)
    adv = torch.where(pos_rows, a_pos, torch.where(neg_rows, a_neg, 0.0))
    return EstimatorResult(
        adv,
        {
            "R": R,
            "correct": correct,
            "shaped_reward": r_pos + r_neg,
            "entropy_share": torch.where(pos_rows, share_pos, share_neg),
            "alive": d_t + h_t,
            "set_mean": torch.where(correct, mean_pos[gidx], mean_neg[gidx]),
            "set_std": torch.where(correct, std_pos[gidx], std_neg[gidx]),
        },
    )


@dataclass(frozen=True)
class EntropyGateConfig(ModifierConfig):
    """Entropy gate (our construction): amplify |A| at each response's high-entropy tokens."""

    factor: float = param(1.5, low=0.0, high=10.0, help="Multiplier of A at pivot tokens")
    q: float = param(0.8, low=0.0, high=1.0, help="Pivots: entropy at or above this quantile of the response")


@register(
    "entropy_gate",
    EntropyGateConfig,
    "Our construction: multiply A by `factor` on each response's top-entropy tokens (per-response "
    "quantile). In the spirit of ERPO / EP-GRPO but not either paper's method",
    needs=("entropies",),
    family="modifier",
    explain=scaled_base,
)
def entropy_gate(batch: RolloutBatch, config: EntropyGateConfig) -> EstimatorResult:
    base = base_advantages(batch, config)
    pivots = response_high_entropy_mask(batch, config.q)
    adv = torch.where(pivots, base * config.factor, base)
    return EstimatorResult(
        torch.where(batch.response_mask, adv, 0.0),
        {"base": base, "pivots": pivots, "factor": torch.where(pivots, config.factor, 1.0)},
    )


@dataclass(frozen=True)
class STAREConfig(ModifierConfig):
    """STARE (official hp-luo/STARE): reweight the top-P% surprisal tokens among A > 0 at low entropy."""

    top_p: float = param(0.1, low=0.0, high=1.0, help="P: share of the A > 0 tokens (A < 0 for C2) selected")
    weight: float = param(1.1, low=0.0, high=10.0, help="W: weight of the selected A > 0 tokens")
    target_entropy: float = param(
        0.3, low=0.0, high=100.0, help="H_tgt: reweight only while the batch's mean entropy is below it"
    )
    variant: Literal["O1", "C2"] = param("O1", help="O1: amplify L+ only; C2: also weight L- (A < 0) by M")
    weight_neg: float = param(0.9, low=0.0, high=10.0, help="M: weight of the selected A < 0 tokens (C2)")

    def scope(self) -> str:
        return registry.widest("step", super().scope())  # the surprisal quantile is over the batch


def _top_surprisal(surprisal: torch.Tensor, candidates: torch.Tensor, ratio: float) -> torch.Tensor:
    """(B, T) bool: the ceil(n P) (at least 1) highest-surprisal tokens among `candidates`, picked by
    torch.topk over the candidates in row-major order (the official selection, ties included)."""
    selected = torch.zeros_like(candidates)
    n = int(candidates.sum())
    if n == 0 or ratio <= 0.0:
        return selected
    k = min(max(1, int(n * ratio + 0.999999)), n)
    _, local = torch.topk(surprisal[candidates], k=k, largest=True)
    flat = candidates.reshape(-1).nonzero(as_tuple=False).squeeze(-1)
    selected.reshape(-1)[flat[local]] = True
    return selected


@register(
    "stare",
    STAREConfig,
    "STARE (official hp-luo/STARE): while the batch's mean token entropy is below H_tgt (0.3), "
    "weight the "
    "top-10% surprisal tokens among A > 0 (over the whole batch) by W = 1.1; otherwise A is unchanged. "
    "The official code computes this per micro-batch of the actor update; here the batch is one",
    needs=("logprobs", "entropies"),
    family="modifier",
    source=STARE_SOURCE,
    explain=scaled_base,
)
def stare(batch: RolloutBatch, config: STAREConfig) -> EstimatorResult:
    """Gate: token-mean entropy over every real token (verl agg_loss 'token-mean', as the official trainer
    logs actor/entropy) < target_entropy. A = omega * base, omega (B, T) = W on L+, M on L- (C2), else 1.

    Diagnostics: base (B, T), omega (B, T), selected_pos / selected_neg (B, T) bool (the top-P% sets, also
    when the gate is off), batch_entropy, target_entropy, gate_on."""
    mask = batch.response_mask
    base = base_advantages(batch, config)
    H = need(batch, "entropies")
    batch_entropy = float((H * mask).sum() / mask.sum().clamp(min=1))
    gate_on = batch_entropy < config.target_entropy
    surprisal = -need(batch, "logprobs")
    l_plus = _top_surprisal(surprisal, mask & (base > 0), config.top_p)
    l_minus = (
        _top_surprisal(surprisal, mask & (base < 0), config.top_p)
        if config.variant == "C2"
        else torch.zeros_like(mask)
    )
    omega = torch.ones_like(base)
    if gate_on:
        omega = torch.where(l_plus, config.weight, omega)
        if config.variant == "C2":
            omega = torch.where(l_minus, config.weight_neg, omega)
    omega = torch.where(mask, omega, 0.0)
    return EstimatorResult(
        torch.where(mask, omega * base, 0.0),
        {
            "base": base,
            "omega": omega,
            "selected_pos": l_plus,
            "selected_neg": l_minus,
            "batch_entropy": batch_entropy,
            "target_entropy": config.target_entropy,
            "gate_on": gate_on,
        },
    )


@dataclass(frozen=True)
class EntropyDropConfig(ModifierConfig):
    """Entropy-drop weight (our construction): A > 0 tokens whose entropy fell versus the old policy."""

    scale: float = param(0.5, low=0.0, high=1.0, help="Weight of A on marked tokens (0 drops them)")


@register(
    "entropy_drop_mask",
    EntropyDropConfig,
    "Our construction: down-weight (x scale) the A > 0 tokens whose entropy fell versus the old policy "
    "(extras old_entropies). Not TEPO, whose token-level KL constraint and sequence-likelihood "
    "aggregation this is not",
    needs=("entropies", "old_entropies"),
    family="modifier",
    aliases=("tepo_mask",),
    explain=scaled_base,
)
def entropy_drop_mask(batch: RolloutBatch, config: EntropyDropConfig) -> EstimatorResult:
    """Diagnostics: base (B, T), marked (B, T) bool (A > 0 and H < old H), weight (B, T)."""
    mask = batch.response_mask
    base = base_advantages(batch, config)
    fell = need(batch, "entropies") < need(batch, "old_entropies")
    marked = (base > 0) & fell & mask
    weight = torch.where(marked, config.scale, 1.0)
    return EstimatorResult(
        torch.where(mask, base * weight, 0.0),
        {"base": base, "marked": marked, "weight": torch.where(mask, weight, 0.0)},
    )


AGGREGATION_SOURCE = (
    "Dr. GRPO (Liu et al., arXiv 2503.20783) as TRL loss_type='dr_grpo' (trl 1.16.0: every "
    "row of the batch, empty ones included, times max_completion_length); "
    "seq-mean-token-mean, token-mean and seq-mean-token-sum as verl agg_loss "
    "(volcengine/verl @ b178a3cd56f58b2d502255daba591e92833930a7)"
)


@dataclass(frozen=True)
class AggregationConfig(ModifierConfig):
    """The effective per-token push c_{i,t} A_{i,t} under a loss-aggregation mode."""

    mode: Literal["seq-mean-token-mean", "token-mean", "seq-mean-token-sum", "dr-grpo"] = param(
        "seq-mean-token-mean", help="Loss aggregation: 1/(B L_i), 1/sum L, 1/B, 1/(B L_budget)"
    )
    l_budget: int = param(
        0,
        low=0,
        high=10_000_000,
        help="Dr. GRPO's fixed generation budget L_budget (max new tokens); 0: the batch's "
        "padded width T (say the budget when you know it)",
    )
    normalize: bool = param(True, help="Multiply c by the batch's real-token count (token-mean gives c = 1)")

    def scope(self) -> str:
        return registry.widest("step", super().scope())  # c depends on the batch size and lengths


@register(
    "aggregation",
    AggregationConfig,
    "Effective per-token push c * A under a loss-aggregation mode "
    "(Dr. GRPO as TRL: c = 1/(B L_budget), B every response, L_budget the generation budget)",
    family="aggregation",
    source=AGGREGATION_SOURCE,
    explain=scaled_base,
)
def aggregation(batch: RolloutBatch, config: AggregationConfig) -> EstimatorResult:
    """c: seq-mean-token-mean 1/(B L_i); token-mean (DAPO) 1/sum_j L_j; seq-mean-token-sum 1/B;
    dr-grpo 1/(B_all L_budget). B counts non-empty responses (verl's agg_loss leaves fully masked ones out);
    B_all counts every response, empty ones included, as TRL's dr_grpo divides by every row.
    `normalize` rescales every mode by N = sum_j L_j so the numbers are per-token pushes comparable with A.
    Diagnostics: base (B, T), weights (B, T) c (times N when normalized), B, N, l_budget."""
    mask = batch.response_mask
    base = base_advantages(batch, config)
    L = mask.sum(dim=1, keepdim=True).to(torch.float32).clamp(min=1)  # (B, 1)
    B = max(int(mask.any(dim=1).sum()), 1)
    N = float(mask.sum().clamp(min=1))
    budget = config.l_budget or mask.shape[1]
    if config.mode == "seq-mean-token-mean":
        c = 1.0 / (B * L)
    elif config.mode == "token-mean":
        c = torch.full_like(L, 1.0 / N)
    elif config.mode == "seq-mean-token-sum":
        c = torch.full_like(L, 1.0 / B)
    else:
        c = torch.full_like(L, 1.0 / (max(mask.shape[0], 1) * budget))
    if config.normalize:
        c = c * N
    weights = torch.where(mask, c.expand_as(base), 0.0)
    note = None
    if config.mode == "dr-grpo" and not config.l_budget:
        note = (
            f"dr-grpo without l_budget: used the padded width T = {budget} (here the longest response), "
            "which makes c depend on the batch; set l_budget to the run's generation budget"
        )
    return EstimatorResult(
        weights * base,
        {
            "base": base,
            "weights": weights,
            "B": B,
            "N": N,
            "l_budget": budget if config.mode == "dr-grpo" else None,
            "fallback": note,
        },
    )
