"""Turn-level credit for agent runs (docs/estimators.md, "Turn-level credit"): one value per assistant turn,
given to that turn's trained tokens.

- `progress_advantage` (deeplearning-wisc/progress-advantage, `pa/scoring.py` `per_step_progress_advantage`
  with `pa/aggregations.py` `aggregate_tokens`): a turn's value is β·(agg(logprobs) − agg(ref_logprobs))
  over its tokens.
- `turn_credit` (PrimeIntellect-ai/prime-rl, `src/prime_rl/orchestrator/algo/turn_credit.py`
  `TurnCreditAlgorithm`, `deltas`, `smear`): a GRPO level over the return shaped by each turn's progress,
  plus β times each turn's centered, backward-smeared progress.
- `gigpo` (langfengQ/verl-agent, `gigpo/core_gigpo.py` `compute_gigpo_outcome_advantage`): the episode's
  group-relative advantage plus `step_advantage_w` times a step advantage relative to the other steps of the
  group that acted on the same observation (an anchor state).

Turns come from `batch.turns` as column spans; the batch an estimator sees has untrained tokens (a tool's
output) out of `response_mask` already (`RolloutBatch.trained`), so "the turn's tokens" are its trained
ones. A response without turns is one assistant turn. The per-turn python loop runs over turns, not tokens.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import torch

from backend.core.batch import RolloutBatch
from backend.core.turns import POLICY_ROLE
from backend.estimators import masked
from backend.estimators.common import Config
from backend.estimators.explaining import Terms
from backend.estimators.registry import EstimatorResult, param, register
from backend.estimators.token_helpers import scores_of

PA_SOURCE = (
    "Progress Advantage: deeplearning-wisc/progress-advantage pa/scoring.py per_step_progress_advantage "
    "(commit 9284b4c0e05360e87cae85d51573f2c6768e8ba2) with pa/aggregations.py aggregate_tokens "
    "(commit b1253bdd1a3a2de87fab823435bbeacffea19957)"
)
TURN_CREDIT_SOURCE = (
    "prime-rl turn credit: PrimeIntellect-ai/prime-rl src/prime_rl/orchestrator/algo/turn_credit.py "
    "TurnCreditAlgorithm, deltas, smear (commit 510fde36c3472ce884a3523e8969da4f9c6f897d)"
)
GIGPO_SOURCE = (
    "GiGPO (arXiv 2505.10978): langfengQ/verl-agent gigpo/core_gigpo.py compute_gigpo_outcome_advantage, "
    "episode_norm_reward, build_step_group, step_norm_reward, compute_step_discounted_returns (commit "
    "29e3e8b3e3412aff53b1e4a461dac77a8eec19bd, read in the fork cq-dong/verl-agent)"
)
TokenAgg = Literal["mean", "sum", "last", "min", "max"]


def assistant_spans(batch: RolloutBatch, row: int) -> list[tuple[int, int]]:
    """The (start, end) column spans of row `row`'s assistant turns; a response without turns is one."""
    turns = batch.turns[row] if batch.turns is not None else []
    if not turns:
        return [(0, batch.T)]
    return [(start, end) for role, start, end in turns if role == POLICY_ROLE]


def turn_index(batch: RolloutBatch) -> tuple[torch.Tensor, list[int]]:
    """(B, T) int64: each trained token's assistant turn (0, 1, ... within its response), -1 elsewhere;
    and the number of assistant turns per response."""
    index = torch.full(batch.response_mask.shape, -1, dtype=torch.long)
    counts = []
    for row in range(batch.B):
        spans = assistant_spans(batch, row)
        for k, (start, end) in enumerate(spans):
            index[row, start:end] = k
        counts.append(len(spans))
    index = index.to(batch.device)
    return torch.where(batch.response_mask, index, torch.full_like(index, -1)), counts


def segment_reduce(x: torch.Tensor, segment: torch.Tensor, n_segments: int, how: str) -> torch.Tensor:
    """(n_segments,) reduction of `x` (B, T) over each segment id of `segment` (B, T), -1 left out; 0 for
    an empty segment (the official `aggregate_tokens` of an empty span)."""
    keep = segment >= 0
    ids, values = segment[keep], x[keep].to(torch.float64)
    count = torch.bincount(ids, minlength=n_segments)
    if how in ("mean", "sum"):
        total = torch.zeros(n_segments, dtype=torch.float64, device=x.device).index_add_(0, ids, values)
        out = total / count.clamp(min=1) if how == "mean" else total
    elif how in ("min", "max"):
        fill = math.inf if how == "min" else -math.inf
        out = torch.full((n_segments,), fill, dtype=torch.float64, device=x.device)
        out = out.scatter_reduce(0, ids, values, reduce="amin" if how == "min" else "amax")
    else:  # last: the value at the largest column of the segment
        cols = torch.arange(x.shape[1], device=x.device).expand_as(x)[keep]
        flat = cols + x.shape[1] * torch.arange(x.shape[0], device=x.device)[:, None].expand_as(x)[keep]
        last = torch.full((n_segments,), -1, dtype=torch.long, device=x.device)
        last = last.scatter_reduce(0, ids, flat, reduce="amax")
        out = x.reshape(-1).to(torch.float64)[last.clamp(min=0)]
    return torch.where(count > 0, out, torch.zeros_like(out))


@dataclass(frozen=True)
class ProgressAdvantageConfig(Config):
    """Progress Advantage: each assistant turn's tokens get β·(agg logprob − agg ref logprob) of the turn."""

    beta: float = param(1.0, low=0.0, high=100.0, help="β: the scale of the turn's log-ratio")
    token_agg: TokenAgg = param(
        "mean", help="How a turn's token logprobs aggregate: mean, sum, last, min, max"
    )


def explain_progress(v: Terms) -> list[str]:
    """A_t = β (agg log π − agg log π_ref) over the token's turn."""
    turn = v.at("turn")
    if turn is None or turn < 0:
        return ["not in an assistant turn: A_t = 0"]
    cfg = v.cfg
    return [
        f"turn {int(turn) + 1}: {cfg.get('token_agg', 'mean')} log π = {v.at('policy_agg'):.4g}, "
        f"{cfg.get('token_agg', 'mean')} log π_ref = {v.at('ref_agg'):.4g}",
        f"A_t = β (agg log π − agg log π_ref) = {float(cfg.get('beta', 1.0)):g} × "
        f"({v.at('policy_agg'):.4g} − {v.at('ref_agg'):.4g}) = {v.A:.4g}",
    ]


@register(
    "progress_advantage",
    ProgressAdvantageConfig,
    "Progress Advantage: each assistant turn's tokens get beta (agg logprob - agg ref logprob) of the turn",
    needs=("logprobs", "ref_logprobs"),
    family="turn",
    source=PA_SOURCE,
    explain=explain_progress,
)
def progress_advantage(batch: RolloutBatch, config: ProgressAdvantageConfig) -> EstimatorResult:
    """A_{i,t} = β (agg_{s ∈ turn(t)} log π_s − agg_{s ∈ turn(t)} log π_ref,s): (B, T), 0 off the turns."""
    mask = batch.response_mask
    index, counts = turn_index(batch)  # (B, T)
    offsets = torch.tensor([0, *counts], device=batch.device).cumsum(0)[:-1]  # (B,)
    segment = torch.where(index >= 0, index + offsets[:, None], index)  # (B, T) a global turn id
    n = int(sum(counts))
    policy = segment_reduce(batch.logprobs, segment, n, config.token_agg)  # (n,)
    ref = segment_reduce(batch.ref_logprobs, segment, n, config.token_agg)  # (n,)
    value = (config.beta * (policy - ref)).to(torch.float32)  # (n,)
    where = segment.clamp(min=0)
    on = segment >= 0
    adv = torch.where(on, value[where], 0.0)  # (B, T)
    diagnostics = {
        "turn": torch.where(on, index, -1).to(torch.float32),
        "policy_agg": torch.where(on, policy.to(torch.float32)[where], 0.0),
        "ref_agg": torch.where(on, ref.to(torch.float32)[where], 0.0),
    }
    return EstimatorResult(torch.where(mask, adv, 0.0), diagnostics)


# --- prime-rl's turn credit -------------------------------------------------------------------------------


def deltas(phis: list[float | None]) -> list[float]:
    """Per-turn progress from per-turn state scores: a scored turn's score minus the previous scored one;
    the first scored turn and unscored (None) turns get 0 (prime-rl's `deltas`)."""
    out, last = [0.0] * len(phis), None
    for i, phi in enumerate(phis):
        if phi is None:
            continue
        if last is not None:
            out[i] = phi - last
        last = phi
    return out


def smear(progress: list[float], gamma: float) -> list[float]:
    """Each turn's progress split over it and the turns before it, γ^d at distance d, normalized so it is
    given out exactly once: c_t = v_t + γ c_{t+1} with v_t = r_t / Σ_{d<t} γ^d (prime-rl's `smear`)."""
    values = [
        r / (t if gamma == 1.0 else (1.0 - gamma**t) / (1.0 - gamma)) for t, r in enumerate(progress, 1)
    ]
    credits, acc = [0.0] * len(values), 0.0
    for t in range(len(values) - 1, -1, -1):
        acc = values[t] + gamma * acc
        credits[t] = acc
    return credits


@dataclass(frozen=True)
class TurnCreditConfig(Config):
    """prime-rl's turn credit: a GRPO level over the progress-shaped return, plus β × centered turn credit."""

    channel: str = param("task", help="Reward channel whose sequence score is the final reward")
    gamma: float = param(0.9, low=0.0, high=1.0, help="γ: how far back a turn's progress is smeared")
    beta: float = param(1.0, low=0.0, high=100.0, help="β: the weight of the turns' centered credit")


def explain_turn_credit(v: Terms) -> list[str]:
    """A_t = level + β (c_turn − c_mean)."""
    seq, turn = v.seq, v.at("turn")
    R, progress, mean = seq.get("R"), seq.get("progress") or 0.0, seq.get("return_mean")
    if R is None or mean is None:  # no score: left out of the group's mean, level 0
        lines = [f"R: no score on this channel, so level = {seq.get('level') or 0.0:.4g}"]
    else:
        lines = [
            f"return = R + net progress = {R:.4g} + {progress:.4g} = {R + progress:.4g}",
            f"level = return − group mean of returns = {R + progress:.4g} − ({mean:.4g}) = "
            f"{seq.get('level') or 0.0:.4g}",
        ]
    if turn is None or turn < 0:
        return [*lines, "not in an assistant turn: A_t = 0"]
    beta = float(v.cfg.get("beta", 1.0))
    return [
        *lines,
        f"A_t = level + β (c_turn − c_mean) = {seq.get('level', 0.0):.4g} + {beta:g} × "
        f"({v.at('credit'):.4g} − {seq.get('center', 0.0):.4g}) = {v.A:.4g}   (turn {int(turn) + 1})",
    ]


@register(
    "turn_credit",
    TurnCreditConfig,
    "prime-rl turn credit: GRPO level over the progress-shaped return plus beta x each turn's centered "
    "smeared progress (turn_rewards)",
    family="turn",
    source=TURN_CREDIT_SOURCE,
    explain=explain_turn_credit,
)
def turn_credit(batch: RolloutBatch, config: TurnCreditConfig) -> EstimatorResult:
    """level_i = (R_i + Σ deltas_i) − mean_group; A_{i,t} = level_i + β (c_{i,k(t)} − c̄_i) on the trained
    tokens of assistant turn k(t), c̄_i the token-weighted mean of the turn credits; a response without
    turn rewards (or β = 0) gets level_i on every trained token. (B, T), 0 elsewhere."""
    mask = batch.response_mask
    R = scores_of(batch, config.channel).to(torch.float64)  # (B,) NaN: no score
    index, counts = turn_index(batch)
    scores = [None if batch.turn_rewards is None or not r else list(r) for r in batch.turn_rewards or []]
    scores += [None] * (batch.B - len(scores))
    progress = torch.tensor([sum(deltas(s)) if s is not None else 0.0 for s in scores], dtype=torch.float64)
    returns = R + progress.to(R.device)  # (B,)
    gidx, n_groups = masked.group_index(batch.group_ids)
    return_mean = masked.group_mean(returns, gidx, n_groups)  # (B,)
    level = torch.nan_to_num(returns - return_mean, nan=0.0)  # (B,)
    trained = mask.sum(dim=1)
    credit = torch.zeros(
        mask.shape, dtype=torch.float64, device=batch.device
    )  # (B, T) c of each token's turn
    center = torch.zeros(batch.B, dtype=torch.float64)
    shaped = torch.zeros(batch.B, dtype=torch.bool)
    for row, s in enumerate(scores):
        if s is None or config.beta == 0.0 or len(s) != counts[row] or int(trained[row]) == 0:
            continue
        c = torch.tensor(smear(deltas(s), config.gamma), dtype=torch.float64, device=batch.device)  # (K,)
        weights = torch.bincount(index[row][index[row] >= 0], minlength=len(s)).to(torch.float64)  # (K,)
        if weights.sum() == 0:
            continue
        center[row] = float((c * weights).sum() / weights.sum())
        on = index[row] >= 0
        credit[row] = torch.where(on, c[index[row].clamp(min=0)], 0.0)
        shaped[row] = True
    shaped_d, center_d = shaped.to(batch.device), center.to(batch.device)
    in_turn = index >= 0
    adv = torch.where(
        shaped_d[:, None],
        torch.where(in_turn, level[:, None] + config.beta * (credit - center_d[:, None]), 0.0),
        level[:, None].expand_as(credit),
    )
    diagnostics = {
        "R": R.to(torch.float32),
        "progress": progress.to(torch.float32),
        "level": level.to(torch.float32),
        "return_mean": return_mean.to(torch.float32),
        "center": center.to(torch.float32),
        "turn": index.to(torch.float32),
        "credit": credit.to(torch.float32),
    }
    return EstimatorResult(torch.where(mask, adv.to(torch.float32), 0.0), diagnostics)


# --- GiGPO ------------------------------------------------------------------------------------------------


def anchor_keys(batch: RolloutBatch, row: int) -> list[tuple]:
    """The observation each assistant turn of `row` acts on, as a hashable key: the prompt for the first
    turn (a group shares its prompt), else the token ids written since the previous assistant turn (a
    tool's answer, an environment's observation). verl-agent's `anchor_obs` is the environment's
    observation without history; on a response this is the closest thing the log holds."""
    spans = assistant_spans(batch, row)
    ids = batch.token_ids[row].tolist()
    keys, previous_end = [], None
    for start, end in spans:
        keys.append(("prompt",) if previous_end is None else ("obs", *ids[previous_end:start]))
        previous_end = end
    return keys


def _relative(values: dict, members: dict, singleton_mean_zero: bool, std_norm: bool, eps: float) -> dict:
    """Each key's value minus its member group's mean, over the group's unbiased std + ε when `std_norm`; a
    group of one has std 1 and mean 0 (episodes) or its own value (steps), as verl-agent's code has it."""
    out = {}
    for keys in members.values():
        vals = torch.tensor([values[k] for k in keys], dtype=torch.float64)
        if len(keys) == 1:
            mean, std = (0.0 if singleton_mean_zero else float(vals[0])), 1.0
        else:
            mean, std = float(vals.mean()), float(vals.std())
        for k in keys:
            out[k] = (values[k] - mean) / (std + eps) if std_norm else values[k] - mean
    return out


@dataclass(frozen=True)
class GiGPOConfig(Config):
    """GiGPO: episode group advantage + step_advantage_w × step advantage over anchor-state groups."""

    channel: str = param("task", help="Reward channel whose sequence score is the episode reward")
    gamma: float = param(
        0.95, low=0.0, high=1.0, help="γ: discount of the step returns (verl-agent's scripts use 0.95)"
    )
    step_advantage_w: float = param(1.0, low=0.0, high=100.0, help="ω: weight of the step advantage")
    mode: Literal["mean_norm", "mean_std_norm"] = param(
        "mean_norm", help="mean_norm: subtract the group mean; mean_std_norm: also divide by std + ε"
    )
    epsilon: float = param(1e-6, low=0.0, high=1.0, help="ε added to the std (mean_std_norm)")


def explain_gigpo(v: Terms) -> list[str]:
    """A_t = A_episode + ω A_step of the token's turn."""
    turn = v.at("turn")
    if turn is None or turn < 0:
        return ["not in an assistant turn: A_t = 0"]
    w = float(v.cfg.get("step_advantage_w", 1.0))
    return [
        f"episode: R = {v.seq.get('R', float('nan')):.4g}, relative to the group's steps: "
        f"A_episode = {v.at('episode_advantage'):.4g}",
        f"step (turn {int(turn) + 1}): return γ^(K−1−k) R = {v.at('step_return'):.4g} among "
        f"{int(v.at('anchor_size'))} step(s) on the same observation: A_step = {v.at('step_advantage'):.4g}",
        f"A_t = A_episode + ω A_step = {v.at('episode_advantage'):.4g} + {w:g} × "
        f"{v.at('step_advantage'):.4g} = {v.A:.4g}",
    ]


@register(
    "gigpo",
    GiGPOConfig,
    "GiGPO (verl-agent): episode group advantage plus step_advantage_w x the step's advantage among the "
    "group's steps on the same observation",
    family="turn",
    source=GIGPO_SOURCE,
    explain=explain_gigpo,
)
def gigpo(batch: RolloutBatch, config: GiGPOConfig) -> EstimatorResult:
    """Each assistant turn k of K is a step; its reward is R on the last turn and 0 before, so its return is
    γ^(K−1−k) R. A_episode: R relative to the group's steps (every step of a response counts, verl-agent's
    compute_mean_std_cross_steps); A_step: the return relative to the group's steps with the same anchor
    observation. A_{i,t} = A_episode + ω A_step on the trained tokens of the turn: (B, T), 0 elsewhere."""
    mask = batch.response_mask
    R = scores_of(batch, config.channel).tolist()  # (B,) NaN: no score, left out
    index, counts = turn_index(batch)  # (B, T)
    groups = batch.group_ids.tolist()
    episode, step, episodes_of, anchors_of = {}, {}, {}, {}
    for row in range(batch.B):
        if math.isnan(R[row]):
            continue
        for k, key in enumerate(anchor_keys(batch, row)):
            episode[row, k] = R[row]
            step[row, k] = config.gamma ** (counts[row] - 1 - k) * R[row]
            episodes_of.setdefault(groups[row], []).append((row, k))
            anchors_of.setdefault((groups[row], key), []).append((row, k))
    std_norm = config.mode == "mean_std_norm"
    a_episode = _relative(episode, episodes_of, True, std_norm, config.epsilon)
    a_step = _relative(step, anchors_of, False, std_norm, config.epsilon)
    size = {k: len(keys) for keys in anchors_of.values() for k in keys}
    per_turn = torch.zeros(4, int(sum(counts)) + 1, dtype=torch.float64)  # column 0: not in a turn
    offsets = torch.tensor([0, *counts], device=batch.device).cumsum(0)[:-1]  # (B,)
    for (row, k), value in a_episode.items():
        col = 1 + int(offsets[row]) + k
        per_turn[:, col] = torch.tensor([value, a_step[row, k], step[row, k], size[row, k]])
    segment = torch.where(index >= 0, index + offsets[:, None] + 1, 0)  # (B, T) column of the token's turn
    episode_adv, step_adv, step_return, anchor_size = per_turn.to(batch.device)[:, segment]  # each (B, T)
    adv = episode_adv + config.step_advantage_w * step_adv  # (B, T)
    diagnostics = {
        "R": torch.tensor(R, dtype=torch.float32),
        "turn": index.to(torch.float32),
        "episode_advantage": episode_adv.to(torch.float32),
        "step_advantage": step_adv.to(torch.float32),
        "step_return": step_return.to(torch.float32),
        "anchor_size": anchor_size.to(torch.float32),
    }
    return EstimatorResult(torch.where(mask, adv.to(torch.float32), 0.0), diagnostics)
