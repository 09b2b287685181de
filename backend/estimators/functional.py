"""The functional core: plain tensor functions with verl-compatible semantics (docs/estimators.md 1-3).

Trainers can call these directly; the registered estimators are thin wrappers around them.
Shapes: `scores (B,)`, `group_ids (B,)`, `response_mask (B, T)`; outputs are `(B, T)` float32 and
exactly 0 on padding. Every function works on CPU and CUDA tensors and never loops over T in python.
"""

from __future__ import annotations

import functools
from typing import Literal

import torch

from backend.estimators import masked

Outcome = Literal["grpo", "dr_grpo", "rloo"]


# ---- 1. group-relative outcome scores ---------------------------------------------------------------


def outcome_center_scale(
    scores: torch.Tensor, group_ids: torch.Tensor, outcome: Outcome = "grpo", epsilon: float = 1e-6
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per response the affine map of the outcome: `Z_i = scale_i * (R_i - center_i)`.

    Returns `center: (B,)`, `scale: (B,)`. The same map turns reward-scale values (Monte Carlo
    values of a prefix, a group mean) into Z units.
    - grpo: center = group mean, scale = 1 / (unbiased std + eps); a singleton group uses
      center 0, scale 1 (Z = R); a zero-variance group (max == min) uses scale 0 (Z = 0 exactly;
      verl would give (R - mean) / eps, which is float noise).
    - dr_grpo: center = group mean (0 for a singleton), scale 1.
    - rloo: center = mean of the other responses of the group (0 for a singleton), scale 1.
    In a group whose scores are all equal the center is that value exactly, so Z = 0 exactly under
    every outcome (never a rounding residue whose sign a later `Z > 0` would read).
    Missing scores (NaN: the rollout has no score on this channel) follow TRL's `GRPOTrainer`: the
    rollout is left out of its group's mean, std and count, and gets scale 0 (so Z = 0 and anything
    mapped into Z units is 0). A group of several responses with fewer than two scores has no
    baseline: scale 0 for all of them (TRL's nan std gives advantage 0 there too).
    """
    scores = scores.to(torch.float32)
    valid = ~torch.isnan(scores)  # (B,)
    x = torch.where(valid, scores, 0.0)  # (B,)
    index, n_groups = masked.group_index(group_ids)
    size = masked.group_count(index, n_groups)[index]  # (B,) members, scored or not
    count = masked.group_sum(valid.to(torch.float32), index, n_groups)  # (G,) scored members
    mean_g = masked.group_sum(x, index, n_groups) / count.clamp(min=1)  # (G,)
    sq = masked.group_sum(torch.where(valid, (x - mean_g[index]) ** 2, 0.0), index, n_groups)
    std = torch.sqrt(sq / (count - 1).clamp(min=1))[index]  # (B,) unbiased
    mean, count = mean_g[index], count[index]
    single = size <= 1
    no_baseline = ~single & (count <= 1)
    zeros, ones = torch.zeros_like(scores), torch.ones_like(scores)
    hi = masked.group_max(torch.where(valid, x, -torch.inf), index, n_groups)
    lo = masked.group_min(torch.where(valid, x, torch.inf), index, n_groups)
    flat = (hi == lo) & ~single  # every score of the group is the same value
    # a flat group's mean is its common value; computed as a sum over n it can be off by one ulp, which
    # would make Z = R - mean a tiny nonzero number whose sign depends on the CPU's rounding
    mean = torch.where(flat, hi, mean)
    if outcome == "grpo":
        center = torch.where(single, zeros, mean)
        scale = torch.where(single, ones, torch.where(flat, zeros, 1.0 / (std + epsilon)))
    elif outcome == "dr_grpo":
        center, scale = torch.where(single, zeros, mean), ones
    elif outcome == "rloo":
        total = masked.group_sum(x, index, n_groups)[index]
        others = torch.where(flat, hi, (total - x) / (count - 1).clamp(min=1))
        center, scale = torch.where(single, zeros, others), ones
    else:
        raise ValueError(f"unknown outcome {outcome!r}; use grpo, dr_grpo or rloo")
    scale = torch.where(valid & ~no_baseline, scale, zeros)
    return center, scale


def outcome_scores(
    scores: torch.Tensor, group_ids: torch.Tensor, outcome: Outcome = "grpo", epsilon: float = 1e-6
) -> torch.Tensor:
    """Z: (B,) float32 group-relative outcome (section 1); exactly 0 where the score is missing (NaN)."""
    center, scale = outcome_center_scale(scores, group_ids, outcome, epsilon)
    scores = scores.to(torch.float32)
    return torch.where(torch.isnan(scores), 0.0, (scores - center) * scale)


def compute_grpo(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    response_mask: torch.Tensor,
    epsilon: float = 1e-6,
    norm_by_std: bool = True,
) -> torch.Tensor:
    """GRPO advantages (B, T): `Z_i` broadcast over real tokens (verl `compute_grpo_outcome_advantage`).

    `norm_by_std=False` is Dr. GRPO (`R_i - mean_G R`).
    """
    z = outcome_scores(scores, group_ids, "grpo" if norm_by_std else "dr_grpo", epsilon)
    return masked.broadcast(z, response_mask.bool())


def compute_dr_grpo(
    scores: torch.Tensor, group_ids: torch.Tensor, response_mask: torch.Tensor
) -> torch.Tensor:
    """Dr. GRPO advantages (B, T): `R_i - mean_G R` broadcast."""
    return compute_grpo(scores, group_ids, response_mask, norm_by_std=False)


def compute_rloo(scores: torch.Tensor, group_ids: torch.Tensor, response_mask: torch.Tensor) -> torch.Tensor:
    """RLOO advantages (B, T): `R_i - mean_{j != i} R_j` broadcast (a singleton keeps R_i)."""
    return masked.broadcast(outcome_scores(scores, group_ids, "rloo"), response_mask.bool())


def maxrl_scores(
    scores: torch.Tensor,
    group_ids: torch.Tensor,
    epsilon: float = 1e-6,
    nonpositive_mean: Literal["divide", "zero"] = "divide",
) -> tuple[torch.Tensor, torch.Tensor]:
    """MaxRL's outcome (docs/estimators.md section 1): `Z_i = (R_i - mean_G R) / (mean_G R + eps)`.

    Returns `Z: (B,)` float32 and the group mean `mean: (B,)` (reward units). The mean is over the
    group's scored members (a NaN score is left out and gets Z = 0); a group whose scores are all equal,
    a singleton included, has its common value as mean, so Z = 0 exactly. `nonpositive_mean`: "divide"
    divides whatever the mean (the official verl patch: for 0/1 rewards a zero mean means a zero
    numerator too); "zero" gives Z = 0 to every member of a group with mean <= 0 (the paper's
    Algorithm 1 and prime-rl). A quotient that is not finite (mean = -eps) is 0.
    """
    scores = scores.to(torch.float32)
    valid = ~torch.isnan(scores)  # (B,)
    x = torch.where(valid, scores, 0.0)  # (B,)
    index, n_groups = masked.group_index(group_ids)
    count = masked.group_sum(valid.to(torch.float32), index, n_groups)  # (G,)
    mean = (masked.group_sum(x, index, n_groups) / count.clamp(min=1))[index]  # (B,)
    hi = masked.group_max(torch.where(valid, x, -torch.inf), index, n_groups)  # (B,)
    lo = masked.group_min(torch.where(valid, x, torch.inf), index, n_groups)  # (B,)
    # a flat group's sum / n can be one ulp off its common value; R - mean must be exactly 0 there
    mean = torch.where(hi == lo, hi, mean)  # (B,)
    z = (x - mean) / (mean + epsilon)  # (B,)
    keep = valid & torch.isfinite(z)
    if nonpositive_mean == "zero":
        keep &= mean > 0
    elif nonpositive_mean != "divide":
        raise ValueError(f"nonpositive_mean must be 'divide' or 'zero', got {nonpositive_mean!r}")
    return torch.where(keep, z, 0.0), torch.where(valid, mean, torch.nan)


# ---- reverse discounted cumsum and GAE ----------------------------------------------------------------

_BLOCK = 16  # measured fastest on 2 CPU cores (16 < 32 < 64) for 512x1024 and 64x8192


@functools.lru_cache(maxsize=64)
def _discount_matrix(discount: float, n: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """U: (n, n) with U[s, t] = discount^(s - t) for s >= t, else 0 (so `x @ U` is the in-block scan)."""
    k = torch.arange(n, dtype=torch.float64)
    power = k[:, None] - k[None, :]  # (n, n) s - t
    base = torch.tensor(discount, dtype=torch.float64)
    u = torch.where(power >= 0, torch.pow(base, power.clamp(min=0)), torch.zeros((), dtype=torch.float64))
    return u.to(dtype=dtype, device=device)


def reverse_discounted_cumsum(x: torch.Tensor, discount: float, block: int = _BLOCK) -> torch.Tensor:
    """y_t = x_t + discount * y_{t+1} along the last dim (y_T = 0): (B, T) -> (B, T).

    A blocked scan: inside blocks of `block` tokens one matmul with the (block, block) matrix of
    discount powers; the carries between blocks are the same problem, `block` times shorter, with
    discount^block, solved recursively. No python loop over T; needs 0 <= discount <= 1 (powers
    never overflow). Float error is that of a `block`-term dot product. The carry is added in place:
    on CPU a fresh (B, T) buffer costs page faults comparable to the arithmetic.
    """
    if not 0.0 <= discount <= 1.0:
        raise ValueError(f"discount must be in [0, 1], got {discount!r}")
    B, T = x.shape
    if T == 0:
        return x.clone()
    if T <= block:
        return x @ _discount_matrix(float(discount), T, x.dtype, str(x.device))
    n_blocks = -(-T // block)
    pad = n_blocks * block - T
    xp = torch.nn.functional.pad(x, (0, pad)) if pad else x
    local = xp.view(B, n_blocks, block) @ _discount_matrix(float(discount), block, x.dtype, str(x.device))
    heads = local[:, :, 0]  # (B, n_blocks): each block's scan value at its first token
    starts = reverse_discounted_cumsum(heads, float(discount) ** block, block)  # y at each block start
    carry = torch.cat([starts[:, 1:], torch.zeros_like(starts[:, :1])], dim=1)  # y at next block start
    local.addcmul_(carry[:, :, None], _tail_powers(float(discount), block, x.dtype, str(x.device)))
    y = local.view(B, n_blocks * block)  # (B, n_blocks * block)
    return y[:, :T] if pad else y


@functools.lru_cache(maxsize=64)
def _tail_powers(discount: float, n: int, dtype: torch.dtype, device: str) -> torch.Tensor:
    """(n,) discount^(n - t) for t = 0..n-1: what the next block's start contributes at token t."""
    power = torch.arange(n, 0, -1, dtype=torch.float64)
    return torch.pow(torch.tensor(discount, dtype=torch.float64), power).to(dtype=dtype, device=device)


def reverse_discounted_cumsum_rows(
    x: torch.Tensor, discount: torch.Tensor, block: int = _BLOCK
) -> torch.Tensor:
    """`reverse_discounted_cumsum` with one discount per row: `discount: (B,)` in [0, 1]; (B, T) -> (B, T).

    The same blocked scan with a (B, block, block) stack of power matrices (one batched matmul per
    level), for GAE with a per-response lambda (VAPO's length-adaptive lambda)."""
    B, T = x.shape
    d = discount.to(torch.float64).reshape(B)
    if bool(((d < 0) | (d > 1)).any()):
        raise ValueError(f"discounts must be in [0, 1], got {d.min().item()!r}..{d.max().item()!r}")
    if T == 0:
        return x.clone()
    n = min(block, T)
    k = torch.arange(n, dtype=torch.float64, device=x.device)
    power = (k[:, None] - k[None, :]).clamp(min=0)  # (n, n) s - t
    u = torch.where(k[:, None] >= k[None, :], d[:, None, None] ** power, 0.0).to(x.dtype)  # (B, n, n)
    if T <= block:
        return torch.bmm(x[:, None, :], u)[:, 0]
    n_blocks = -(-T // block)
    pad = n_blocks * block - T
    xp = torch.nn.functional.pad(x, (0, pad)) if pad else x
    local = torch.bmm(xp.view(B, n_blocks, block), u)  # (B, n_blocks, block)
    starts = reverse_discounted_cumsum_rows(local[:, :, 0].contiguous(), d**block, block)
    carry = torch.cat([starts[:, 1:], torch.zeros_like(starts[:, :1])], dim=1)  # (B, n_blocks)
    tail = (d[:, None] ** torch.arange(block, 0, -1, dtype=torch.float64, device=x.device)).to(x.dtype)
    local.add_(carry[:, :, None] * tail[:, None, :])  # (B, n_blocks, block)
    y = local.reshape(B, n_blocks * block)
    return y[:, :T] if pad else y


def discounted_returns(
    rewards: torch.Tensor, response_mask: torch.Tensor, gamma: float = 1.0
) -> torch.Tensor:
    """Rewards-to-go `G_t = sum_{k >= t} gamma^(k - t) r_k` over real tokens (masked tokens skipped)."""
    zero = torch.zeros_like(rewards)
    return compute_gae(rewards, zero, response_mask, gamma, 1.0)[0]


def compute_gae(
    token_level_rewards: torch.Tensor,
    values: torch.Tensor,
    response_mask: torch.Tensor,
    gamma: float,
    lam: float | torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE with verl semantics, before whitening: `(advantages (B, T), returns (B, T))`.

    `delta_t = r_t + gamma V_next - V_t`, `A_t = delta_t + gamma lam A_next`, `V_{L+1} = 0`,
    `returns = A + V`. Masked positions (padding or mid-sequence observation spans) pass the next
    value and the running advantage through unchanged, which is GAE over the real tokens packed to
    the left; so we pack, scan with `reverse_discounted_cumsum`, and unpack. Unlike verl (which
    leaves the carried values on masked positions), both outputs are exactly 0 on masked positions.
    `lam` may be a (B,) tensor: one lambda per response (VAPO's length-adaptive lambda).
    Every step after the first two `where`s works in place: at 512 x 1024 on CPU each fresh (B, T)
    temporary costs about as much as the arithmetic, so the chain allocates only what it returns.
    """
    mask = response_mask.bool()
    B, T = mask.shape
    zero = torch.zeros((), dtype=torch.float32, device=mask.device)
    v = torch.where(mask, values.to(torch.float32), zero)  # padding may hold anything
    holes = not masked.is_left_packed(mask)
    if holes:
        # Pack the real tokens left with one scatter each of r and v (masked tokens, whatever they
        # hold, go to a spare column T); unpack with one gather of the same index.
        k = mask.cumsum(dim=1).sub_(1).masked_fill_(~mask, T)  # (B, T) int64 slot among real tokens
        packed = torch.zeros((2, B, T + 1), dtype=torch.float32, device=mask.device)
        delta = packed[0].scatter_(1, k, token_level_rewards.to(torch.float32))[:, :T]
        v_p = packed[1].scatter_(1, k, v)[:, :T]
    else:
        delta = torch.where(mask, token_level_rewards.to(torch.float32), zero)  # becomes delta in place
        v_p = v
    delta.sub_(v_p)
    delta[:, :-1].add_(v_p[:, 1:], alpha=gamma)  # (B, T) r + gamma V_next - V, V_next = 0 past the end
    if isinstance(lam, torch.Tensor):
        adv = reverse_discounted_cumsum_rows(delta, float(gamma) * lam.to(delta.device))
    else:
        adv = reverse_discounted_cumsum(delta, float(gamma) * float(lam))
    if holes:
        adv = adv.gather(1, k.clamp_(max=T - 1)).mul_(mask)  # exactly 0 on masked positions
    # else: delta is exactly 0 on the trailing padding, so the scan leaves exact zeros there already
    return adv, adv + v


# ---- 2. weighted redistribution ---------------------------------------------------------------------


def redistribute(
    z: torch.Tensor, weights: torch.Tensor, response_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Credit operator: `r_t = Z w_t / sum_k w_k` and `A_t = L r_t = Z w_t / mean_k w_k`.

    Returns `advantages (B, T)`, `token_rewards r (B, T)`, `fallback (B,) bool`: rows whose weights
    vanish (or are not finite) on the whole response use uniform weights (A = Z broadcast).
    """
    mask = response_mask.bool()
    w = torch.where(mask, weights.to(torch.float32), 0.0)
    total = w.sum(dim=1)  # (B,)
    fallback = ~(total > 0) | ~torch.isfinite(total)
    fallback = fallback & mask.any(dim=1)
    w = torch.where(fallback[:, None], mask.to(w.dtype), w)
    total = w.sum(dim=1).clamp(min=torch.finfo(w.dtype).tiny)
    r = z.to(torch.float32)[:, None] * w / total[:, None]  # (B, T)
    L = mask.sum(dim=1).to(w.dtype)
    return r * L[:, None], r, fallback


def segment_values(
    values: torch.Tensor, valued: torch.Tensor, start: torch.Tensor | None, end: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The value at both ends of each token's Monte Carlo segment (VinePPO: A_t = V(t_{k+1}) - V(t_k)).

    values: (B, T) V̂ at the valued positions (ignored elsewhere); valued: (B, T) bool
    start: (B,) the value before the first valued position (the empty prefix), or None: tokens there
        get v_start = v_end, so their difference is 0
    end: (B,) the value after the last valued position (the observed outcome)
    returns: v_start (B, T) V̂ at the latest valued position <= t; v_end (B, T) V̂ at the next valued
        position > t, or `end`. The segment advantage is `v_end - v_start`.
    """
    T = values.shape[1]
    cur = masked.forward_fill_index(valued)  # (B, T) latest valued position <= t
    nxt = masked.backward_fill_index(valued, strict=True)  # (B, T) next valued position > t
    v_end = torch.where(nxt < T, values.gather(1, nxt.clamp(max=T - 1)), end[:, None].expand(-1, T))
    before = v_end if start is None else start[:, None].expand(-1, T)
    v_start = torch.where(cur >= 0, values.gather(1, cur.clamp(min=0)), before)
    return v_start, v_end
