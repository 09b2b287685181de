"""The display prefix tree of a group: the prefix_tree estimator's trie with each run of nodes that
holds the same responses drawn as one node, numbered as the Group view shows them."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import pandas as pd
import torch

from backend.core.arrays import to_numpy, to_tensor
from backend.estimators.tree import build_prefix_tree


@dataclass
class TreeNode:
    """A run of tokens shared by `members` (a radix-tree edge): positions [start, end) of each member."""

    node_id: int
    parent: int | None
    start: int
    end: int
    members: list[int]
    value: float
    children: list[int] = field(default_factory=list)

    @property
    def branches(self) -> bool:
        return len(self.children) >= 2


@dataclass
class PrefixTree:
    nodes: list[TreeNode]

    def node_at(self, member: int, pos: int) -> TreeNode:
        """The node holding position `pos` of response `member`."""
        node = self.nodes[0]
        while True:
            if node.start <= pos < node.end or not node.children:
                return node
            nxt = [self.nodes[c] for c in node.children if member in self.nodes[c].members]
            if not nxt:
                return node
            node = nxt[0]

    def frame(self, tokens: list[list[str]] | None = None, max_label: int = 24) -> pd.DataFrame:
        """One row per node: node_id, parent, label, start, end, count, value, branches, td.

        `td` is V(node) - V(parent): the TD correction a branching parent passes to this child
        (0 below non-branching parents, where the tree estimator reduces to GRPO).
        """
        rows = []
        for n in self.nodes:
            text = ""
            if tokens is not None and n.members:
                text = "".join(tokens[n.members[0]][n.start : n.end])
            label = text if len(text) <= max_label else text[: max_label - 1] + "…"
            parent = self.nodes[n.parent] if n.parent is not None else None
            td = n.value - parent.value if parent is not None and parent.branches else 0.0
            rows.append(
                {
                    "node_id": n.node_id,
                    "parent": n.parent,
                    "label": label or ("prompt" if n.parent is None else f"[{n.start}:{n.end})"),
                    "start": n.start,
                    "end": n.end,
                    "count": len(n.members),
                    "value": n.value,
                    "branches": n.branches,
                    "td": td,
                }
            )
        return pd.DataFrame(rows)


def prefix_tree(token_ids: list[list[int]], z: np.ndarray | torch.Tensor) -> PrefixTree:
    """The radix tree of a group's responses (shared prefixes merged), with V(u) = mean Z of its members.

    token_ids: G lists of ids; z: (G,) outcome per response. Node 0 is the root (the prompt, empty).
    The tree is the prefix_tree estimator's trie (`build_prefix_tree` node tables, one node per token
    depth) with each run of trie nodes that holds the same responses drawn as one node.
    """
    G = len(token_ids)
    if G == 0:
        return PrefixTree([TreeNode(0, None, 0, 0, [], 0.0)])
    lengths = [len(ids) for ids in token_ids]
    tokens = torch.zeros((G, max(max(lengths), 1)), dtype=torch.long)  # (G, T), T >= 1 for the trie
    for i, ids in enumerate(token_ids):
        tokens[i, : lengths[i]] = torch.as_tensor(ids, dtype=torch.long)
    mask = torch.arange(tokens.shape[1]) < torch.tensor(lengths)[:, None]  # (G, T)
    z = to_tensor(to_numpy(z), torch.float64)
    trie = build_prefix_tree(tokens, mask, torch.zeros(G, dtype=torch.long), z, with_nodes=True)
    parent, count, value = trie.node_parent, trie.node_count, trie.node_value.tolist()
    is_root = parent < 0
    above = parent.clamp(min=0)
    # A trie node opens a display node unless it continues its parent's run: the parent is not the
    # root and holds the same responses (none ends or goes another way there).
    opens = ~is_root & (is_root[above] | (count != count[above]))  # (N,)
    nodes = [TreeNode(0, None, 0, 0, list(range(G)), value[int(is_root.nonzero()[0, 0])])]
    display_of: dict[int, int] = {}  # trie node that opens a display node -> index in `nodes`
    for i, length in enumerate(lengths):
        path = trie.token_node[i, :length]  # (L,) trie node reached after each token
        cuts = opens[path].nonzero()[:, 0].tolist() + [length]
        up = 0
        for start, end in pairwise(cuts):
            node = int(path[start])
            if node not in display_of:
                display_of[node] = len(nodes)
                nodes.append(TreeNode(len(nodes), up, start, end, [], value[node]))
            up = display_of[node]
            nodes[up].members.append(i)
    return _numbered(nodes)


def _numbered(nodes: list[TreeNode]) -> PrefixTree:
    """The tree with the node ids the views show: expanding the last numbered node first, a node's
    children get consecutive ids in the order of their first response."""
    children: list[list[int]] = [[] for _ in nodes]
    for node in nodes[1:]:
        children[node.parent].append(node.node_id)
    order, stack = [0], [0]
    while stack:
        kids = sorted(children[stack.pop()], key=lambda k: nodes[k].members[0])
        order += kids
        stack += kids
    new_id = {old: new for new, old in enumerate(order)}
    renumbered = []
    for old in order:
        n = nodes[old]
        up = None if n.parent is None else new_id[n.parent]
        kids = sorted(new_id[k] for k in children[old])
        renumbered.append(TreeNode(new_id[old], up, n.start, n.end, n.members, n.value, kids))
    return PrefixTree(renumbered)
