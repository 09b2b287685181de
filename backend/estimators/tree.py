"""Prefix tree of a group (docs/estimators.md section 4, TEMPO / P2T-style), built without token loops.

The responses of a prompt form a trie over token ids. The node reached by the first d tokens of
response i is `s_{i,d}`; `D(s_{i,d}) = {j : lcp(i, j) >= d}` where `lcp` is the longest common prefix
of the two token sequences, and `V(s) = mean_{j in D(s)} Z_j`. So one vectorized comparison of
every pair in a group (cumulative equality, read off with `argmax` of the first mismatch) gives
the whole tree: per response a histogram of its pair LCPs, reverse-cumsummed over depth, is
`|D(s_{i,d})|` and `sum_{D} Z` for every depth at once.

Conventions: a response's extent is up to its last real token (mid-sequence masked tokens are still
part of the text). A node branches if it has >= 2 children, where the end of a response counts as a
child ("stop here" is a different continuation than any next token). For the token at position d of
response i the branch flag is `|D(s_{i,d+1})| < |D(s_{i,d})|`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.estimators import masked

_MAX_PAIR_ELEMENTS = 1 << 25


@dataclass(frozen=True)
class PrefixTree:
    """v_before: (B, T) V(s_{i,t}) before token t; v_after: (B, T) V(s_{i,t+1}); branch: (B, T) bool;
    count_before: (B, T) |D(s_{i,t})|. Node tables (flat over the batch, None unless asked for):
    node_group (N,) group id, node_parent (N,) (-1 at roots), node_depth (N,), node_value (N,),
    node_count (N,), node_branch (N,) bool; token_node (B, T) node reached after token t, -1 on padding."""

    v_before: torch.Tensor
    v_after: torch.Tensor
    branch: torch.Tensor
    count_before: torch.Tensor
    node_group: torch.Tensor | None = None
    node_parent: torch.Tensor | None = None
    node_depth: torch.Tensor | None = None
    node_value: torch.Tensor | None = None
    node_count: torch.Tensor | None = None
    node_branch: torch.Tensor | None = None
    token_node: torch.Tensor | None = None


def pair_lcp(tokens: torch.Tensor, extent: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Longest common prefix of every pair in each group.

    tokens: (n, G, T) int64, extent: (n, G, T) bool (inside the response), valid: (n, G) bool slot
    holds a response. Returns lcp: (n, G, G) int64, -1 for pairs with an empty slot; lcp(i, i) = L_i.
    """
    n, G, T = tokens.shape
    differ = tokens[:, :, None, :] != tokens[:, None, :, :]  # (n, G, G, T)
    differ |= ~extent[:, :, None, :] | ~extent[:, None, :, :]
    differ = torch.cat([differ, differ.new_ones((n, G, G, 1))], dim=-1)  # (n, G, G, T+1) sentinel
    lcp = differ.to(torch.uint8).argmax(dim=-1)  # first mismatch = common prefix length
    pair_ok = valid[:, :, None] & valid[:, None, :]
    return torch.where(pair_ok, lcp, torch.full_like(lcp, -1))


def build_prefix_tree(
    token_ids: torch.Tensor,
    response_mask: torch.Tensor,
    group_ids: torch.Tensor,
    z: torch.Tensor,
    with_nodes: bool = False,
) -> PrefixTree:
    """The prefix tree of every group of the batch, with V = mean Z over each node's responses."""
    mask = response_mask.bool()
    B, T = mask.shape
    device = mask.device
    ends = masked.last_index(mask) + 1  # (B,) extent length
    extent = torch.arange(T, device=device) < ends[:, None]  # (B, T)
    index, n_groups = masked.group_index(group_ids)
    table, g_max = masked.group_slots(index, n_groups)  # (nG, G)
    v_before = torch.zeros((B, T), dtype=torch.float32, device=device)
    v_after = torch.zeros_like(v_before)
    count_before = torch.zeros((B, T), dtype=torch.long, device=device)
    branch = torch.zeros((B, T), dtype=torch.bool, device=device)
    node_parts: list[tuple] = []
    node_offset = 0
    token_node = torch.full((B, T), -1, dtype=torch.long, device=device) if with_nodes else None
    per_chunk = max(1, _MAX_PAIR_ELEMENTS // max(1, g_max * g_max * max(T, 1)))
    zf = z.to(torch.float64)
    for start in range(0, n_groups, per_chunk):  # loops over chunks of groups, never over tokens
        tab = table[start : start + per_chunk]  # (n, G)
        valid = tab >= 0
        rows = tab.clamp(min=0)
        lcp = pair_lcp(token_ids[rows], extent[rows] & valid[..., None], valid)  # (n, G, G)
        n, G = tab.shape
        value, count, b = _depth_sets(lcp, zf[rows], T)
        sel = valid.reshape(-1)
        dest = tab.reshape(-1)[sel]
        v_before[dest] = value[:, :, :T].reshape(n * G, T)[sel]
        v_after[dest] = value[:, :, 1 : T + 1].reshape(n * G, T)[sel]
        count_before[dest] = count[:, :, :T].reshape(n * G, T)[sel].long()
        branch[dest] = b.reshape(n * G, T)[sel]
        if with_nodes:
            part, node_offset = _nodes(lcp, valid, rows, ends, value, count, b, node_offset, start, index)
            node_parts.append(part[:-1])
            token_node[dest] = part[-1].reshape(n * G, T)[sel]
    within = mask
    branch = branch & within
    out = dict(
        v_before=torch.where(within, v_before, 0.0),
        v_after=torch.where(within, v_after, 0.0),
        branch=branch,
        count_before=torch.where(within, count_before, 0),
    )
    if with_nodes:
        out.update(_node_tables(node_parts, group_ids, device))
        out["token_node"] = torch.where(within, token_node, -1)
    return PrefixTree(**out)


def _depth_sets(
    lcp: torch.Tensor, z: torch.Tensor, T: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The nodes on each response's path, from its pair LCPs: a histogram over depth, then a reverse
    cumsum gives |D(s_{i,d})| and sum_{D} Z for every depth at once.

    lcp: (n, G, G) int64, -1 for an empty slot; z: (n, G) float64. Returns value: (n, G, T+2) float32
    V(s_{i,d}); count: (n, G, T+2) float64 |D(s_{i,d})| for d = 0..T+1; branch: (n, G, T) bool, token d
    changes the set."""
    n, G, _ = lcp.shape
    bucket = lcp.clamp(min=0)
    ok = (lcp >= 0).to(torch.float64)
    zj = z[:, None, :].expand(n, G, G) * ok
    hist_n = torch.zeros((n, G, T + 2), dtype=torch.float64, device=lcp.device).scatter_add_(2, bucket, ok)
    hist_z = torch.zeros_like(hist_n).scatter_add_(2, bucket, zj)
    count = hist_n.flip(2).cumsum(2).flip(2)  # (n, G, T+2): |D(s_{i,d})| for d = 0..T+1
    total = hist_z.flip(2).cumsum(2).flip(2)
    value = (total / count.clamp(min=1)).to(torch.float32)  # V(s_{i,d})
    branch = count[:, :, 1 : T + 1] < count[:, :, :T]  # (n, G, T) token d changes the set
    return value, count, branch


def _node_tables(node_parts: list[tuple], group_ids: torch.Tensor, device) -> dict[str, torch.Tensor]:
    """The chunks' node tables joined (`PrefixTree`'s node_* fields), node_group as the batch's group ids."""
    out = {}
    cols = list(zip(*node_parts, strict=True)) if node_parts else [[] for _ in range(6)]
    names = ("node_group", "node_parent", "node_depth", "node_value", "node_count", "node_branch")
    for name, parts in zip(names, cols, strict=True):
        out[name] = torch.cat(list(parts)) if parts else torch.zeros(0, device=device)
    gid_of = torch.unique(group_ids)
    if out["node_group"].numel():
        out["node_group"] = gid_of[out["node_group"].long()]
    return out


def _nodes(lcp, valid, rows, ends, value, count, token_branch, offset, group_start, index):
    """Node tables of a chunk of groups. A node (group, depth d) is owned by the lowest slot whose
    first d tokens reach it: rep[i, d] = min{j : lcp(i, j) >= d}."""
    n, G, _ = lcp.shape
    T = token_branch.shape[2]
    device = lcp.device
    slot = torch.arange(G, device=device)
    cand = torch.where(lcp >= 0, slot[None, None, :].expand(n, G, G), torch.full_like(lcp, G))
    rep = torch.full((n, G, T + 2), G, dtype=torch.long, device=device)
    rep = rep.scatter_reduce(2, lcp.clamp(min=0), cand, reduce="amin")
    rep = rep.flip(2).cummin(2).values.flip(2)  # (n, G, T+2) smallest slot sharing depth d
    length = torch.where(valid, ends[rows], torch.full_like(rows, -1))  # (n, G)
    depth = torch.arange(T + 1, device=device)
    inside = depth[None, None, :] <= length[:, :, None]  # (n, G, T+1) node s_{i,d} exists
    rep = rep[:, :, : T + 1]
    owned = inside & (rep == slot[None, :, None])
    ids = torch.full((n, G, T + 1), -1, dtype=torch.long, device=device)
    n_nodes = int(owned.sum())
    ids[owned] = torch.arange(offset, offset + n_nodes, device=device)
    gi = torch.arange(n, device=device)[:, None, None].expand(n, G, T + 1)
    di = depth[None, None, :].expand(n, G, T + 1)
    node_of = torch.where(inside, ids[gi, rep.clamp(max=G - 1), di], -1)  # (n, G, T+1) node of s_{i,d}
    parent_all = torch.cat([torch.full_like(node_of[:, :, :1], -1), node_of[:, :, :-1]], dim=2)
    tb = torch.cat([token_branch, torch.zeros_like(token_branch[:, :, :1])], dim=2)  # (n, G, T+1)
    branch = torch.zeros(n_nodes, dtype=torch.long, device=device)
    branch = branch.scatter_reduce(0, node_of[inside] - offset, (tb & inside)[inside].long(), reduce="amax")
    group_of = (group_start + torch.arange(n, device=device))[:, None, None].expand(n, G, T + 1)
    part = (
        group_of[owned],
        parent_all[owned],
        di[owned],
        value[:, :, : T + 1][owned],
        count[:, :, : T + 1][owned].long(),
        branch.bool(),
        node_of[:, :, 1:],
    )
    return part, offset + n_nodes
