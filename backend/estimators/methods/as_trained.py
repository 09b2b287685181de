"""The advantage a GRPO trainer trained on, rebuilt from the run's rewards and the trainer's recipe.

TRL's GRPOTrainer (1.16, `_generate_and_score_completions`) and verl's `compute_grpo_outcome_advantage` sum
the reward functions first, with their weights, and normalize the sum in its group:

    R_i = Σ_c w_c R_{i,c}      A_i = (R_i − mean_G R) / (std_G R + ε)   (scale "group"; "none": no division)

and put A_i on every trained token. Because the map is linear in R, the advantage splits exactly by reward
channel with one shared std:

    A_i = Σ_c term_{i,c},   term_{i,c} = w_c (R_{i,c} − mean_G R_c) / (std_G R + ε)

`term` chooses one of them (what a view's channel row shows), `''` the whole advantage. The recipe's numbers
(weights, scale, ε) come from the run (`backend.credit.as_trained.recipe`); the defaults are TRL's. KL is not
here: TRL and verl's GRPO put it in the loss, never in the advantage. A rollout with no reward at all is left
out of its group's statistics and gets 0 (TRL's nansum over all-NaN rewards); a missing reward of one
function counts as 0 in R, as nansum does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from backend.core.batch import BatchError, RolloutBatch
from backend.core.errors import InputError
from backend.estimators import functional as F
from backend.estimators import masked
from backend.estimators.common import Config
from backend.estimators.explaining import Terms, broadcast
from backend.estimators.registry import EstimatorResult, param, register


def parse_weights(text: str) -> dict[str, float]:
    """'format:1,task:0.5' -> {'format': 1.0, 'task': 0.5}; '' -> {} (every scored channel, weight 1)."""
    weights: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.rpartition(":")
        try:
            weight = float(value)
        except ValueError:
            weight = None
        if not sep or not name or weight is None:
            raise InputError(f"weights {text!r}: write channel:weight pairs, e.g. 'format:1,task:1'")
        weights[name] = weight
    return weights


@dataclass(frozen=True)
class AsTrainedConfig(Config):
    """The trainer's advantage: R = Σ_c w_c R_c, A = (R − mean_G R) / (std_G R + ε)."""

    weights: str = param(
        "", help="Reward channels the trainer summed, with weights: 'format:1,task:1' ('': every channel, 1)"
    )
    scale: Literal["group", "none"] = param(
        "group", help="Divide by the group's std (TRL scale_rewards='group') or not ('none': Dr. GRPO)"
    )
    epsilon: float = param(1e-4, low=0.0, high=1.0, help="Added to the std (TRL 1e-4, verl 1e-6)")
    term: str = param(
        "", help="'': the whole advantage; a channel: its term w_c (R_c − mean_G R_c) / (std + ε)"
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        parse_weights(self.weights)

    def reads(self) -> tuple[str, ...]:
        return ()  # the scores only


def channel_weights(batch: RolloutBatch, config: AsTrainedConfig) -> dict[str, float]:
    """The channels summed into R with their weights: the config's, or every scored channel with weight 1."""
    weights = parse_weights(config.weights) or {c: 1.0 for c in batch.scores}
    missing = [c for c in weights if c not in batch.scores]
    if missing:
        raise BatchError(f"as_trained: the recipe sums {missing}, which this run has no scores for")
    if config.term and config.term not in weights:
        raise BatchError(
            f"as_trained: term {config.term!r} is not one of the summed channels {sorted(weights)}"
        )
    return weights


def _divisor(seq: dict, cfg: dict) -> str:
    if cfg.get("scale") != "group" or seq.get("group_std") is None:
        return ""
    return f" / ({seq['group_std']:.4g} + {cfg['epsilon']:.0e})"


def explain_as_trained(v: Terms) -> list[str]:
    """The trainer's recipe with this response's numbers: R, the group statistics, A (and the term)."""
    seq, cfg = v.seq, v.cfg
    if seq.get("R") is None:
        return ["no reward from any reward function: left out of the group, A = 0 (TRL's nansum)"]
    parts = [
        f"{seq.get('weight:' + c, 1.0):.4g}×{seq['R:' + c]:.4g} ({c})"
        for c in v.notes.get("channels", [])
        if seq.get("R:" + c) is not None
    ]
    lines = [f"R = Σ_c w_c R_c = {' + '.join(parts)} = {seq['R']:.4g}"]
    mean, std, n = seq.get("group_mean"), seq.get("group_std"), seq.get("group_n")
    if cfg.get("scale") == "group":
        lines.append(
            f"A = (R − mean_G) / (std_G + ε) = ({seq['R']:.4g} − {mean:.4g}) / ({std:.4g} + "
            f"{cfg['epsilon']:.0e})"
            f" = {seq['A']:.4g}   (G = {n:.0f}; std unbiased)"
        )
    else:
        lines.append(f"A = R − mean_G = {seq['R']:.4g} − {mean:.4g} = {seq['A']:.4g}   (G = {n:.0f})")
    term = cfg.get("term")
    if term and seq.get("term") is not None:
        lines.append(
            f"{term}'s term = w (R_c − mean_G R_c) / (std_G + ε) = {seq.get('weight:' + term, 1.0):.4g} × "
            f"({seq['R:' + term]:.4g} − {seq['mean:' + term]:.4g}){_divisor(seq, cfg)} = {seq['term']:.4g}"
        )
    return [*lines, *broadcast(v)]


@register(
    "as_trained",
    AsTrainedConfig,
    "As trained: the trainer's advantage (reward functions summed with their weights, then group-normalized)",
    family="outcome",
    explain=explain_as_trained,
)
def as_trained(batch: RolloutBatch, config: AsTrainedConfig) -> EstimatorResult:
    weights = channel_weights(batch, config)
    names = list(weights)
    scored = torch.stack([batch.scores[c].to(torch.float32) for c in names])  # (C, B)
    weighted = torch.stack([weights[c] * scored[i] for i, c in enumerate(names)])  # (C, B)
    unscored = torch.isnan(scored).all(dim=0)  # (B,)
    R = torch.where(unscored, torch.nan, torch.nansum(weighted, dim=0))  # (B,)
    outcome = "grpo" if config.scale == "group" else "dr_grpo"
    center, scale = F.outcome_center_scale(R, batch.group_ids, outcome, config.epsilon)  # (B,), (B,)
    z = torch.where(unscored, 0.0, (R - center) * scale)  # (B,)
    diagnostics: dict[str, object] = {"R": R, "group_mean": center, "scale": scale, "channels": names}
    index, n_groups = masked.group_index(batch.group_ids)
    valid = (~unscored).to(torch.float32)
    count = masked.group_sum(valid, index, n_groups)  # (G,)
    diagnostics["group_n"] = count[index]
    if config.scale == "group":
        diagnostics["group_std"] = torch.where(scale > 0, 1.0 / scale.clamp(min=1e-30) - config.epsilon, 0.0)
    single = masked.group_count(index, n_groups)[index] <= 1  # (B,) a singleton keeps R (center 0)
    value = z
    for i, c in enumerate(names):
        x = torch.where(unscored | torch.isnan(weighted[i]), 0.0, weighted[i])  # (B,) w_c R_c, 0 if missing
        mean_c = torch.where(
            single, 0.0, (masked.group_sum(x * valid, index, n_groups) / count.clamp(min=1))[index]
        )
        term = torch.where(unscored, 0.0, (x - mean_c) * scale)  # (B,)
        diagnostics[f"R:{c}"] = batch.scores[c].to(torch.float32)
        diagnostics[f"mean:{c}"] = mean_c / weights[c] if weights[c] else mean_c
        diagnostics[f"weight:{c}"] = torch.full_like(z, weights[c])
        if c == config.term:
            value = term
            diagnostics["term"] = term
    diagnostics["A"], diagnostics["Z"] = z, value
    return EstimatorResult(masked.broadcast(value, batch.response_mask), diagnostics)
