"""Small analysis helpers behind the app's views (no Streamlit here).

The views show numbers; this module computes them: token classes and credit mass per class, rank
agreement between estimators, channel shares of |A| and the split-channel credit of a group (the
per-token "why this credit" breakdown), the display prefix tree of a group (drawn from the
prefix_tree estimator's trie), the dual-ascent replay, resampling a stored rollout, and the oracle
and Monte Carlo teacher tables. Shapes follow docs/estimators.md: `(B, T)` plus `response_mask`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from itertools import pairwise

import numpy as np
import pandas as pd
import torch

from backend import token_classes
from backend.batch import RolloutBatch
from backend.estimators.tree import build_prefix_tree
from backend.metrics import spearman

# The default display classes for "credit mass by token class", `other` last (a run may define its own:
# backend.token_classes).
CREDIT_CLASSES = token_classes.names()


def _np(x: torch.Tensor | np.ndarray) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def token_class_ids(batch: RolloutBatch, classes: tuple = token_classes.DEFAULT_CLASSES) -> np.ndarray:
    """classes: (B, T) int64 index into `token_classes.names(classes)`, -1 on padding."""
    return token_classes.class_ids(batch, classes)


def token_class_labels(batch: RolloutBatch, row: int,
                       classes: tuple = token_classes.DEFAULT_CLASSES) -> list[str]:
    """The class name of every real token of response `row`."""
    return token_classes.labels(batch, row, classes)


def credit_mass_by_class(
    advantages: dict[str, torch.Tensor], classes: np.ndarray, response_mask: torch.Tensor,
    class_names: tuple[str, ...] = CREDIT_CLASSES,
) -> pd.DataFrame:
    """Share of Σ|A| that lands on each token class, per estimator.

    advantages: name -> (B, T); classes: (B, T) from `token_class_ids`.
    returns: rows (estimator, token_class, credit_share, token_share); credit_share sums to 1 per
    estimator (NaN when the estimator gives no credit at all), token_share is the class's share of
    real tokens, so credit_share > token_share means the class gets more than its count.
    """
    mask = _np(response_mask).astype(bool)
    n_tokens = max(int(mask.sum()), 1)
    rows = []
    for name, adv in advantages.items():
        magnitude = np.abs(_np(adv).astype(np.float64)) * mask
        total = magnitude.sum()
        for c, label in enumerate(class_names):
            in_class = (classes == c) & mask
            if not in_class.any():
                continue
            rows.append(
                {
                    "estimator": name,
                    "token_class": label,
                    "credit_share": float(magnitude[in_class].sum() / total) if total > 0 else math.nan,
                    "token_share": float(in_class.sum() / n_tokens),
                }
            )
    return pd.DataFrame(rows, columns=["estimator", "token_class", "credit_share", "token_share"])


def rank_agreement(advantages: dict[str, torch.Tensor], response_mask: torch.Tensor) -> pd.DataFrame:
    """Spearman correlation of A between every pair of estimators, pooled over real tokens.

    returns: a square DataFrame indexed and columned by estimator name (NaN where one is constant).
    """
    mask = response_mask.bool().cpu()
    flat = {name: adv.detach().cpu()[mask] for name, adv in advantages.items()}
    names = list(flat)
    out = pd.DataFrame(np.eye(len(names)), index=names, columns=names)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            rho = spearman(flat[a], flat[b]) if flat[a].numel() > 1 else math.nan
            out.loc[a, b] = out.loc[b, a] = rho
        if flat[a].numel() < 2 or float(flat[a].std()) == 0.0:
            out.loc[a, a] = math.nan
    return out


def abs_shares(parts: dict[str, torch.Tensor | np.ndarray]) -> dict[str, float]:
    """Share of Σ|part| of each named part (channels of A), over all entries; NaN when all are 0."""
    totals = {name: float(np.abs(_np(p).astype(np.float64)).sum()) for name, p in parts.items()}
    grand = sum(totals.values())
    return {name: (v / grand if grand > 0 else math.nan) for name, v in totals.items()}


def token_shares(parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per token, each part's share of Σ_c |part_c| at that token: name -> (L,) in [0, 1] (0 where all 0)."""
    stack = np.abs(np.stack([np.asarray(p, dtype=np.float64) for p in parts.values()]))  # (C, L)
    total = stack.sum(axis=0)  # (L,)
    share = np.divide(stack, total, out=np.zeros_like(stack), where=total > 0)
    return {name: share[c] for c, name in enumerate(parts)}


# ---- the display prefix tree ------------------------------------------------------------------------


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
    z = torch.as_tensor(_np(z), dtype=torch.float64)
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


# ---- channel credit of a group -----------------------------------------------------------------------


@dataclass
class ChannelCredit:
    """The split-channel credit of a batch (one group, usually), as numpy arrays.

    final: (B, T) A_final = Σ_c β_c Ã_c; contributions: channel -> (B, T) β_c Ã_c;
    per_channel: channel -> (B, T) Ã_c (normalized, before β); betas: channel -> β_c.
    """

    final: np.ndarray
    contributions: dict[str, np.ndarray]
    per_channel: dict[str, np.ndarray]
    betas: dict[str, float]
    projected: dict[str, np.ndarray] = field(default_factory=dict)
    """channel -> (B, T) the projection before normalization (an estimator channel: its advantages)."""


def channel_specs(batch: RolloutBatch, estimator: str = "grpo", config: tuple = (),
                  betas: dict[str, float] | None = None,
                  normalizations: dict[str, str] | None = None) -> dict:
    """The default channel specs of `batch` with `estimator` (overrides `config`) on the task channel,
    `betas` overriding β_c and `normalizations` overriding a channel's normalization (group, batch, none)."""
    import dataclasses

    from backend import channels

    specs = _with_task_estimator(channels.default_specs(batch), estimator, dict(config))
    if betas:
        specs = {c: (_replace_beta(s, betas[c]) if c in betas else s) for c, s in specs.items()}
    unknown = sorted(set(normalizations or {}) - set(specs))
    if unknown:
        raise ValueError(f"normalization for {unknown}: this run's channels are {sorted(specs)}")
    for c, mode in (normalizations or {}).items():
        specs[c] = dataclasses.replace(specs[c], normalization=mode)  # ChannelSpec checks the mode
    return specs


def channel_credit(
    batch: RolloutBatch, estimator: str = "grpo", config: tuple = (), betas: dict[str, float] | None = None,
    projected: dict[str, torch.Tensor] | None = None, normalizations: dict[str, str] | None = None,
) -> ChannelCredit:
    """Split-channel credit with estimator `estimator` (overrides `config`) on the task channel and
    each other channel projected by its default spec (docs/estimators.md, channels); `betas` override β_c.
    projected: estimator channels computed at their scope (see backend.estimates.group_channel_credit)."""
    from backend import channels

    specs = channel_specs(batch, estimator, config, betas, normalizations)
    result = channels.combine(batch, specs, projected)
    contributions = {c: _np(v).astype(np.float32) for c, v in result.contributions.items()}
    per_channel = {c: _np(v).astype(np.float32) for c, v in result.per_channel.items()}
    raw = {c: _np(v).astype(np.float32) for c, v in result.projected.items()}
    used = {c: float(s.beta) for c, s in specs.items()}
    return ChannelCredit(_np(result.final).astype(np.float32), contributions, per_channel, used, raw)


def _with_task_estimator(specs: dict, estimator: str, config: dict) -> dict:
    import dataclasses

    task = specs.get("task")
    if task is None:
        return specs
    overrides = tuple(sorted(config.items()))
    return {
        **specs,
        "task": dataclasses.replace(
            task, projection="estimator", estimator=estimator, estimator_config=overrides
        ),
    }


def _replace_beta(spec, beta: float):
    import dataclasses

    return dataclasses.replace(spec, beta=float(beta))


def credit_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """B − A per token (the Compare view's difference row)."""
    return np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)


# ---- dual ascent replay ----------------------------------------------------------------------------


def dual_ascent_replay(
    step_means: pd.DataFrame,
    tau: dict[str, float],
    eta: float,
    beta0: dict[str, float],
    mode: str = "projected",
    priority: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Replay constraint mode over a run's logged steps (docs/estimators.md section 8).

    step_means: rows (step, channel, violation_rate) as `Store.step_channel_means` gives them;
    tau, beta0: per constrained channel. Returns rows (step, channel, beta, rate, tau) where `beta` is
    β_c after the update with that step's violation rate (plus a row at step "start" - 1 with β0).
    """
    from backend import channels

    names = [c for c in tau if c in set(step_means["channel"])]
    if not names:
        return pd.DataFrame(columns=["step", "channel", "beta", "rate", "tau"])
    wide = step_means.pivot(index="step", columns="channel", values="violation_rate").sort_index()
    wide = wide.reindex(columns=names).fillna(0.0)
    steps = wide.index.to_numpy()
    rates = torch.tensor(wide.to_numpy(), dtype=torch.float64)  # (S, C)
    betas = channels.dual_ascent(
        rates,
        torch.tensor([tau[c] for c in names], dtype=torch.float64),
        float(eta),
        torch.tensor([beta0.get(c, 1.0) for c in names], dtype=torch.float64),
        mode,
        tuple(names.index(c) for c in priority if c in names),
    ).numpy()  # (S + 1, C)
    rows = []
    start = (steps[0] - 1) if len(steps) else -1
    for c, name in enumerate(names):
        rows.append(
            {"step": start, "channel": name, "beta": float(betas[0, c]), "rate": math.nan, "tau": tau[name]}
        )
        for s, step in enumerate(steps):
            rows.append(
                {
                    "step": int(step),
                    "channel": name,
                    "beta": float(betas[s + 1, c]),
                    "rate": float(rates[s, c]),
                    "tau": tau[name],
                }
            )
    return pd.DataFrame(rows)


# ---- resampling from the app --------------------------------------------------------------------------


def resample_rollout(
    engine,
    rollout: dict,
    verifier: str | None,
    positions: list[int],
    samples: int,
    progress=None,
    cancel=None,
    seed: int = 0,
):
    """Suffix resampling of one stored rollout (the dict `Store.rollout` returns) with a loaded engine.

    Returns the `ResampleResult` (a cancelled run keeps its finished samples).
    """
    from backend.errors import InputError
    from backend.models.resample import resample

    verifier = verifier or "answer_match"
    truth = rollout.get("ground_truth")
    if truth is None:
        truth = (rollout.get("meta") or {}).get("ground_truth")
    if truth is None and ":" not in verifier:
        raise InputError(f"rollout {rollout.get('rollout_id')} has no ground truth for verifier {verifier!r}")
    prompt_ids = rollout.get("prompt_ids")
    prompt_ids = list(prompt_ids) if prompt_ids is not None else engine.encode(rollout.get("prompt") or "")
    return resample(
        engine,
        prompt_ids,
        list(rollout["token_ids"]),
        positions,
        samples=samples,
        verifier=verifier,
        ground_truth=truth,
        seed=seed,
        progress=progress,
        cancel=cancel,
    )


def suggested_positions(kind: str, tokens: list[str], entropies, k: int = 5) -> list[int]:
    """Positions to resample: `entropy` (top-k entropy) or `steps` (the states right after each line
    that ends a reasoning step; position 0, the start, is not a step end)."""
    from backend.models.resample import suggest_entropy, suggest_steps

    if kind == "entropy":
        if entropies is None:
            return []
        return suggest_entropy(list(entropies), k)
    return [p for p in suggest_steps(list(tokens), include_start=False) if p < len(tokens)]


# ---- oracle metrics -------------------------------------------------------------------------------------


def has_oracle(batch: RolloutBatch) -> bool:
    return all(k in batch.extras and batch.extras[k].dim() == 2 for k in ("key_mask", "true_credit"))


def oracle_table(batch: RolloutBatch, estimators: list[str]) -> tuple[pd.DataFrame, list[str]]:
    """Section-9 credit metrics per estimator on a synthetic run, in the mixed/single (scores summed,
    one estimator) and mixed/split (channels projected and normalized separately) pipelines.

    Returns (rows: pipeline, estimator, one column per metric; errors: one line per estimator that failed).
    """
    from backend import channels
    from backend.estimators.registry import estimate
    from backend.metrics import METRICS, batch_metrics

    styled = "style" in batch.scores and "style" in batch.token_rewards
    rows, errors = [], []
    for name in estimators:
        try:
            task_only = estimate(name, batch).advantages  # the estimator on the task score alone
            single = channels.mixed_baseline(batch, {c: 1.0 for c in batch.scores}, estimator=name)
            rows.append(
                {
                    "pipeline": "single",
                    "estimator": name,
                    **batch_metrics(single, batch, single - task_only if styled else None),
                }
            )
            specs = {"task": channels.ChannelSpec("task", "estimator", estimator=name, normalization="group")}
            if styled:
                specs["style"] = channels.ChannelSpec("style", "span", normalization="group")
            split = channels.combine(batch, specs)
            rows.append(
                {
                    "pipeline": "split",
                    "estimator": name,
                    **batch_metrics(split.final, batch, split.contributions.get("style")),
                }
            )
        except Exception as exc:  # noqa: BLE001 - one estimator's failure must not hide the others
            errors.append(f"{name}: {type(exc).__name__}: {exc}")
    return pd.DataFrame(rows, columns=["pipeline", "estimator", *METRICS]), errors


def teacher_agreement(
    batch: RolloutBatch,
    advantages: dict[str, torch.Tensor],
    mc_values: pd.DataFrame,
    outcome_channel: str = "task",
) -> pd.DataFrame:
    """On real runs: agreement of each estimator with the Monte Carlo teacher where resampled values exist.

    mc_values: rows (rollout_id, pos, value) from `Store.resample_values`. The teacher's per-token
    advantages are the segment differences of V̂ (docs/estimators.md section 5); compared tokens are those of
    rollouts with at least one valued position. Returns rows (estimator, spearman, sign_accuracy, tokens).
    """
    from backend.models.resample import segment_advantages

    teacher = np.zeros(tuple(batch.response_mask.shape), dtype=np.float32)
    judged = np.zeros_like(teacher, dtype=bool)
    rows_of = {int(r): i for i, r in enumerate(batch.rollout_ids.tolist())}
    scores = batch.scores.get(outcome_channel)
    for rid, part in mc_values.groupby("rollout_id"):
        i = rows_of.get(int(rid))
        if i is None:
            continue
        L = int(batch.lengths[i])
        outcome = float(scores[i]) if scores is not None else 0.0
        teacher[i, :L] = segment_advantages(dict(zip(part["pos"], part["value"], strict=True)), L, outcome)
        judged[i, int(part["pos"].min()) : L] = True
    out = []
    target = torch.from_numpy(teacher[judged])
    for name, adv in advantages.items():
        a = adv.detach().cpu()[torch.from_numpy(judged)]
        nonzero = target != 0
        out.append(
            {
                "estimator": name,
                "spearman": spearman(a, target) if a.numel() > 1 else math.nan,
                "sign_accuracy": float(
                    (torch.sign(a[nonzero]) == torch.sign(target[nonzero])).double().mean()
                )
                if bool(nonzero.any())
                else math.nan,
                "tokens": int(judged.sum()),
            }
        )
    return pd.DataFrame(out, columns=["estimator", "spearman", "sign_accuracy", "tokens"])
