"""Twin of tree.py: the group's prefix tree as a dict of prefixes (a trie), values as plain means."""

from __future__ import annotations

from collections import defaultdict

from backend.core.batch import RolloutBatch


def prefix_tree_loop(batch: RolloutBatch, z: list[float]):
    """V(s_{i,t}), V(s_{i,t+1}) and the branch flag per real token, from a dict-of-prefixes trie.

    A node is (group, prefix); its value is the mean Z of the responses through it; a node branches when
    two or more distinct next tokens (or the end of a response) leave it."""
    mask = batch.response_mask.tolist()
    toks = batch.token_ids.tolist()
    groups = batch.group_ids.tolist()
    seqs = []
    for i in range(len(mask)):
        end = max([t + 1 for t, m in enumerate(mask[i]) if m], default=0)
        seqs.append(tuple(toks[i][:end]))
    members: dict = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    through: dict = {}
    children: dict = defaultdict(set)
    for g, idx in members.items():
        for i in idx:
            for d in range(len(seqs[i]) + 1):
                node = (g, seqs[i][:d])
                through.setdefault(node, []).append(i)
                children[node].add(seqs[i][d] if d < len(seqs[i]) else "<end>")
    v_before, v_after, branch = [], [], []
    for i in range(len(mask)):
        g = groups[i]
        vb, va, br = [], [], []
        for t, m in enumerate(mask[i]):
            if not m:
                continue
            here, nxt = (g, seqs[i][:t]), (g, seqs[i][: t + 1])
            vb.append(sum(z[j] for j in through[here]) / len(through[here]))
            va.append(sum(z[j] for j in through[nxt]) / len(through[nxt]))
            br.append(len(children[here]) >= 2)
        v_before.append(vb)
        v_after.append(va)
        branch.append(br)
    return v_before, v_after, branch
