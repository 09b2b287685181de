"""Masked and grouped reductions: the one helper module every estimator uses.

Convention: tensors are `(B, T)` with `response_mask: (B, T) bool`; per-response tensors are `(B,)`.
Group helpers take `group_index: (B,) int64` in `[0, n_groups)` from `group_index(group_ids)`, so a
batch with arbitrary group ids costs one `torch.unique` and then only `index_add`/`scatter_reduce`.
"""

from __future__ import annotations

import torch


def masked_sum(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Sum of `x` over `mask` (padding may hold anything, including NaN)."""
    x = torch.where(mask, x, torch.zeros((), dtype=x.dtype, device=x.device))
    return x.sum() if dim is None else x.sum(dim=dim)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """Mean of `x` over `mask`; 0 where the mask is empty."""
    total = masked_sum(x, mask, dim)
    count = mask.sum() if dim is None else mask.sum(dim=dim)
    return total / count.clamp(min=1).to(total.dtype)


def masked_var(x: torch.Tensor, mask: torch.Tensor, unbiased: bool = True) -> torch.Tensor:
    """Variance of `x` over all of `mask` (a scalar); 0 for fewer than two elements."""
    mean = masked_mean(x, mask)
    n = mask.sum()
    sq = masked_sum((x - mean) ** 2, mask)
    denom = (n - 1 if unbiased else n).clamp(min=1).to(sq.dtype)
    return torch.where(n > (1 if unbiased else 0), sq / denom, torch.zeros_like(sq))


def masked_whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """`(x - mean) / sqrt(var + eps)` over the real tokens (verl's whitening); 0 on padding."""
    mean = masked_mean(x, mask)
    out = (x - mean) * torch.rsqrt(masked_var(x, mask) + eps)
    return out * mask


def lengths(mask: torch.Tensor) -> torch.Tensor:
    """L_i: (B,) int64 number of real tokens."""
    return mask.sum(dim=1)


def positions(mask: torch.Tensor) -> torch.Tensor:
    """k: (B, T) int64 index of each real token among the real tokens of its row (0-based); -1 on padding."""
    k = mask.long().cumsum(dim=1) - 1
    return torch.where(mask, k, torch.full_like(k, -1))


def last_index(mask: torch.Tensor) -> torch.Tensor:
    """(B,) int64 position of the last real token of each row; -1 for an empty row."""
    T = mask.shape[1]
    idx = torch.arange(T, device=mask.device).expand_as(mask)
    return torch.where(mask, idx, torch.full_like(idx, -1)).amax(dim=1)


def is_left_packed(mask: torch.Tensor) -> bool:
    """True when every row is a run of real tokens starting at 0 followed by padding only."""
    if mask.shape[1] < 2:
        return True
    return not bool((mask[:, 1:] > mask[:, :-1]).any())  # no False -> True step along a row


def forward_fill_index(valid: torch.Tensor) -> torch.Tensor:
    """(B, T) int64: for each t the largest s <= t with `valid[s]`, or -1 where there is none."""
    T = valid.shape[1]
    idx = torch.arange(T, device=valid.device).expand_as(valid)
    return torch.where(valid, idx, torch.full_like(idx, -1)).cummax(dim=1).values


def backward_fill_index(valid: torch.Tensor, strict: bool = False) -> torch.Tensor:
    """(B, T) int64: for each t the smallest s >= t (s > t when `strict`) with `valid[s]`, or T if none."""
    T = valid.shape[1]
    idx = torch.arange(T, device=valid.device).expand_as(valid)
    nxt = torch.where(valid, idx, torch.full_like(idx, T)).flip(1).cummin(dim=1).values.flip(1)
    if strict:
        nxt = torch.cat([nxt[:, 1:], torch.full_like(nxt[:, :1], T)], dim=1)
    return nxt


# ---- groups -------------------------------------------------------------------------------------------


def group_index(group_ids: torch.Tensor) -> tuple[torch.Tensor, int]:
    """Dense group index (B,) int64 in [0, n_groups) and n_groups."""
    if group_ids.numel() == 0:
        return group_ids.long(), 0
    uniq, inverse = torch.unique(group_ids, return_inverse=True)
    return inverse, int(uniq.numel())


def group_sum(x: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(n_groups, ...) sums of the rows of `x` (B, ...) per group."""
    out = torch.zeros((n_groups, *x.shape[1:]), dtype=x.dtype, device=x.device)
    return out.index_add_(0, index, x)


def group_count(index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(n_groups,) int64 responses per group."""
    return torch.bincount(index, minlength=n_groups)


def group_mean(x: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(B,) mean over the group of each response, of the non-NaN values (a missing score is NaN);
    0 for a group without any."""
    valid = ~torch.isnan(x)
    count = group_sum(valid.to(x.dtype), index, n_groups).clamp(min=1)
    return (group_sum(torch.where(valid, x, 0.0), index, n_groups) / count)[index]


def group_max(x: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(B,) max over the group of each response (-inf for an empty group)."""
    out = torch.full((n_groups,), -torch.inf, dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, index, x, reduce="amax")[index]


def group_min(x: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(B,) min over the group of each response (+inf for an empty group)."""
    out = torch.full((n_groups,), torch.inf, dtype=x.dtype, device=x.device)
    return out.scatter_reduce(0, index, x, reduce="amin")[index]


def group_mean_std(
    x: torch.Tensor, index: torch.Tensor, n_groups: int, unbiased: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per response: group mean (B,), group std (B,) (N-1 when `unbiased`; 0 for singletons), count (B,)."""
    count = group_count(index, n_groups)
    n = count.clamp(min=1).to(x.dtype)
    mean = group_sum(x, index, n_groups) / n  # (G,)
    sq = group_sum((x - mean[index]) ** 2, index, n_groups)
    denom = (count - 1 if unbiased else count).clamp(min=1).to(x.dtype)
    std = torch.sqrt(sq / denom)
    return mean[index], std[index], count[index]


def group_range_is_zero(x: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(B,) bool: every response of the group has exactly the same value (max == min)."""
    hi = torch.full((n_groups,), -torch.inf, dtype=x.dtype, device=x.device)
    lo = torch.full((n_groups,), torch.inf, dtype=x.dtype, device=x.device)
    hi = hi.scatter_reduce(0, index, x, reduce="amax")
    lo = lo.scatter_reduce(0, index, x, reduce="amin")
    return (hi == lo)[index]


def group_token_mean_std(
    x: torch.Tensor, mask: torch.Tensor, index: torch.Tensor, n_groups: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and unbiased std (B, 1) over all real tokens of each response's group."""
    xs = masked_sum(x, mask, dim=1)  # (B,)
    count = group_sum(mask.sum(dim=1).to(x.dtype), index, n_groups)  # (G,)
    mean = group_sum(xs, index, n_groups) / count.clamp(min=1)  # (G,)
    dev = torch.where(mask, (x - mean[index][:, None]) ** 2, torch.zeros_like(x)).sum(dim=1)
    var = group_sum(dev, index, n_groups) / (count - 1).clamp(min=1)
    return mean[index][:, None], torch.sqrt(var)[index][:, None]


def group_slots(index: torch.Tensor, n_groups: int) -> tuple[torch.Tensor, int]:
    """A (n_groups, G_max) table of response rows per group, -1 where a group is smaller than G_max."""
    count = group_count(index, n_groups)
    g_max = int(count.max()) if n_groups else 0
    order = torch.argsort(index, stable=True)
    starts = torch.cumsum(count, 0) - count  # (G,)
    sorted_index = index[order]
    slot = torch.arange(index.numel(), device=index.device) - starts[sorted_index]
    table = torch.full((n_groups, max(g_max, 1)), -1, dtype=torch.long, device=index.device)
    table[sorted_index, slot] = order
    return table, g_max


def row_quantile(x: torch.Tensor, mask: torch.Tensor, q: float) -> torch.Tensor:
    """(B, 1) q-quantile of each row's real tokens (linear interpolation, like `torch.quantile`)."""
    big = torch.finfo(x.dtype).max
    xs = torch.where(mask, x, torch.full_like(x, big)).sort(dim=1).values  # (B, T)
    L = mask.sum(dim=1).clamp(min=1)
    pos = q * (L - 1).to(torch.float64)
    lo = pos.floor().long()
    hi = pos.ceil().long()
    frac = (pos - lo.to(torch.float64)).to(x.dtype)
    v_lo = xs.gather(1, lo[:, None])
    v_hi = xs.gather(1, hi[:, None])
    return v_lo + (v_hi - v_lo) * frac[:, None]


def broadcast(z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """A_{i,t} = z_i on every real token: (B, T), 0 on padding."""
    return z[:, None].to(torch.float32) * mask
