"""Slow twins: plain python loops, one per vectorized estimator, written straight from ESTIMATORS.md.

Tests compare every registered estimator with its twin (`reference_advantages(name, batch, config)`).
The GRPO and GAE twins follow verl's `compute_grpo_outcome_advantage` and
`compute_gae_advantage_return` line by line (a dict of per-group score lists; a reverse time loop
that carries `nextvalues` and `lastgaelam` across masked positions), so "fast == twin" plus
"twin == verl's algorithm" is the chain of evidence when verl itself is not installed.
Nothing here is fast; do not call it on real batches.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict

import numpy as np
import torch

from backend.batch import RolloutBatch
from backend.estimators.features import classify_token

# ---- verl-style loops ------------------------------------------------------------------------------

def verl_grpo_loop(token_level_rewards: torch.Tensor, response_mask: torch.Tensor, index: list,
                   epsilon: float = 1e-6, norm_adv_by_std_in_grpo: bool = True) -> torch.Tensor:
    """verl's GRPO outcome advantage, as a loop: scores = sum of token rewards, per-group mean/std."""
    scores = token_level_rewards.sum(dim=-1)
    id2score: dict = defaultdict(list)
    id2mean, id2std = {}, {}
    bsz = scores.shape[0]
    for i in range(bsz):
        id2score[index[i]].append(scores[i])
    for idx in id2score:
        if len(id2score[idx]) == 1:
            id2mean[idx] = torch.tensor(0.0)
            id2std[idx] = torch.tensor(1.0)
        elif len(id2score[idx]) > 1:
            group = torch.stack(id2score[idx])
            id2mean[idx] = torch.mean(group)
            id2std[idx] = torch.std(group)
    out = scores.clone()
    for i in range(bsz):
        if norm_adv_by_std_in_grpo:
            out[i] = (scores[i] - id2mean[index[i]]) / (id2std[index[i]] + epsilon)
        else:
            out[i] = scores[i] - id2mean[index[i]]
    return out.unsqueeze(-1) * response_mask


def verl_gae_loop(token_level_rewards: torch.Tensor, values: torch.Tensor, response_mask: torch.Tensor,
                  gamma: float, lam: float) -> tuple[torch.Tensor, torch.Tensor]:
    """verl's GAE before whitening: reverse time loop, masked steps carry next value and running A."""
    nextvalues = torch.zeros(values.shape[0])
    lastgaelam = torch.zeros(values.shape[0])
    advantages_reversed = []
    gen_len = token_level_rewards.shape[-1]
    mask = response_mask.to(values.dtype)
    for t in reversed(range(gen_len)):
        delta = token_level_rewards[:, t] + gamma * nextvalues - values[:, t]
        lastgaelam_ = delta + gamma * lam * lastgaelam
        nextvalues = values[:, t] * mask[:, t] + (1 - mask[:, t]) * nextvalues
        lastgaelam = lastgaelam_ * mask[:, t] + (1 - mask[:, t]) * lastgaelam
        advantages_reversed.append(lastgaelam)
    advantages = torch.stack(advantages_reversed[::-1], dim=1)
    returns = advantages + values
    return advantages, returns


# ---- per-response helpers ----------------------------------------------------------------------------

def _rows(batch: RolloutBatch) -> list[list[int]]:
    """Real token columns of each response."""
    mask = batch.response_mask.cpu().tolist()
    return [[t for t, m in enumerate(row) if m] for row in mask]


def outcome_loop(scores: list[float], groups: list[int], outcome: str = "grpo",
                 eps: float = 1e-6) -> list[float]:
    """Z per response, from the formulas of section 1."""
    members: dict = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    z = [0.0] * len(scores)
    for idx in members.values():
        vals = [float(scores[i]) for i in idx]
        n = len(vals)
        mean = sum(vals) / n
        for i in idx:
            R = float(scores[i])
            if n == 1:
                z[i] = R
            elif outcome == "grpo":
                if max(vals) == min(vals):
                    z[i] = 0.0
                else:
                    std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
                    z[i] = (R - mean) / (std + eps)
            elif outcome == "dr_grpo":
                z[i] = R - mean
            else:
                z[i] = R - (sum(vals) - R) / (n - 1)
    return z


def _center_scale(scores, groups, outcome, eps):
    members: dict = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [(0.0, 1.0)] * len(scores)
    for idx in members.values():
        vals = [float(scores[i]) for i in idx]
        n = len(vals)
        mean = sum(vals) / n
        for i in idx:
            if n == 1:
                out[i] = (0.0, 1.0)
            elif outcome == "grpo":
                std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
                out[i] = (mean, 0.0 if max(vals) == min(vals) else 1.0 / (std + eps))
            elif outcome == "dr_grpo":
                out[i] = (mean, 1.0)
            else:
                out[i] = ((sum(vals) - vals[idx.index(i)]) / (n - 1), 1.0)
    return out


def _z(batch, config):
    return outcome_loop(batch.scores[config.channel].tolist(), batch.group_ids.tolist(),
                        getattr(config, "outcome", "grpo"), getattr(config, "epsilon", 1e-6))


def _quantile(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = q * (len(s) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _gae_rows(batch, r_rows, v_rows, gamma, lam):
    """GAE per response over its real tokens (lists)."""
    out = []
    for r, v in zip(r_rows, v_rows, strict=True):
        adv = [0.0] * len(r)
        running, next_v = 0.0, 0.0
        for k in reversed(range(len(r))):
            delta = r[k] + gamma * next_v - v[k]
            running = delta + gamma * lam * running
            adv[k] = running
            next_v = v[k]
        out.append(adv)
    return out


def _values_rows(batch, config, z, rows):
    source = config.value_source
    if source == "zero":
        return [[0.0] * len(c) for c in rows]
    if source == "stored":
        return [[float(batch.values[i, t]) for t in c] for i, c in enumerate(rows)]
    if source == "prefix_tree":
        v_before, _, _ = prefix_tree_loop(batch, z)
        return [[v_before[i][k] for k in range(len(c))] for i, c in enumerate(rows)]
    # fitted / mc: shared with the fast path (tested separately)
    from backend.estimators.common import values_for

    values, _ = values_for(batch, config, torch.tensor(z, dtype=torch.float32))
    return [[float(values[i, t]) for t in c] for i, c in enumerate(rows)]


def _to_tensor(batch, rows, per_row) -> torch.Tensor:
    out = torch.zeros(batch.response_mask.shape, dtype=torch.float32)
    for i, cols in enumerate(rows):
        for k, t in enumerate(cols):
            out[i, t] = per_row[i][k]
    return out


def _finish(batch, config, z, rows, r_rows):
    if getattr(config, "then_gae", False):
        v_rows = _values_rows(batch, config, z, rows)
        return _to_tensor(batch, rows, _gae_rows(batch, r_rows, v_rows, config.gamma, config.lam))
    return _to_tensor(batch, rows, [[x * len(r) for x in r] for r in r_rows])


def redistribute_loop(batch, config, weight_rows) -> torch.Tensor:
    rows = _rows(batch)
    z = _z(batch, config)
    r_rows = []
    for i, w in enumerate(weight_rows):
        total = sum(w)
        if not total > 0 or not math.isfinite(total):
            w = [1.0] * len(w)
            total = float(len(w))
        r_rows.append([z[i] * x / total for x in w])
    return _finish(batch, config, z, rows, r_rows)


def _entropy_rows(batch, rows):
    return [[max(float(batch.entropies[i, t]), 0.0) for t in c] for i, c in enumerate(rows)]


def credit_weights_loop(name: str, batch: RolloutBatch, config) -> list[list[float]]:
    """Weights of every section-2 operator, token by token."""
    rows = _rows(batch)
    out = []
    for i, cols in enumerate(rows):
        L = len(cols)
        w = []
        H = [max(float(batch.entropies[i, t]), 0.0) for t in cols] if batch.entropies is not None else None
        for k in range(L):
            t = k + 1
            if name == "terminal_gae":
                w.append(1.0 if t == L else 0.0)
            elif name == "recency":
                w.append(config.kappa ** (L - t))
            elif name == "early_late":
                w.append(config.kappa ** (t - 1) + config.kappa ** (L - t))
            elif name == "entropy":
                w.append(H[k] ** config.p)
            elif name == "high_entropy_mask":
                w.append(1.0 if H[k] >= _quantile(H, config.q) else 0.0)
            elif name == "step_boundary":
                text = batch.tokens[i][k] if batch.tokens is not None else ""
                w.append(1.0 if t == L or re.search(config.pattern, text) else 0.0)
            elif name in ("trace", "s_trace"):
                d = config.trace_gamma * config.trace_lam
                x = d ** (L - t)
                if config.mode == "both":
                    x = 0.5 * (x + d ** (t - 1))
                if name == "s_trace":
                    x *= 1.0 if H[k] >= _quantile(H, config.q) else 0.0
                w.append(x)
            elif name == "hapo":
                mean_h = sum(H) / L
                w.append(1.0 if mean_h <= 0 else 1 - config.alpha + config.alpha * H[k] / mean_h)
        out.append(w)
    return out


# ---- section 4: prefix tree with an explicit trie ------------------------------------------------------

def prefix_tree_loop(batch: RolloutBatch, z: list[float]):
    """V(s_{i,t}), V(s_{i,t+1}) and the branch flag per real token, from a dict-of-prefixes trie."""
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
    v_before, v_after, branch = [], [], []
    node_d: dict = {}
    children: dict = defaultdict(set)
    for g, idx in members.items():
        for i in idx:
            for d in range(len(seqs[i]) + 1):
                node = (g, seqs[i][:d])
                node_d.setdefault(node, []).append(i)
                children[node].add(seqs[i][d] if d < len(seqs[i]) else "<end>")
    for i in range(len(mask)):
        g = groups[i]
        vb, va, br = [], [], []
        for t, m in enumerate(mask[i]):
            if not m:
                continue
            here, nxt = (g, seqs[i][:t]), (g, seqs[i][:t + 1])
            vb.append(sum(z[j] for j in node_d[here]) / len(node_d[here]))
            va.append(sum(z[j] for j in node_d[nxt]) / len(node_d[nxt]))
            br.append(len(children[here]) >= 2)
        v_before.append(vb)
        v_after.append(va)
        branch.append(br)
    return v_before, v_after, branch


# ---- section 5, 6, 7 --------------------------------------------------------------------------------

def suffix_mc_loop(batch, config) -> torch.Tensor:
    rows = _rows(batch)
    R = batch.scores[config.channel].tolist()
    groups = batch.group_ids.tolist()
    cs = _center_scale(R, groups, config.outcome, config.epsilon)
    mc, mm = batch.extras["mc_values"], batch.extras["mc_mask"]
    out = []
    for i, cols in enumerate(rows):
        grp = [R[j] for j in range(len(R)) if groups[j] == groups[i]]
        root = sum(grp) / len(grp)
        valued = [t for t in cols if float(mm[i, t]) > 0.5]
        row = []
        for t in cols:
            before = [s for s in valued if s <= t]
            after = [s for s in valued if s > t]
            v_cur = float(mc[i, before[-1]]) if before else root
            v_next = float(mc[i, after[0]]) if after else R[i]
            row.append(cs[i][1] * (v_next - v_cur))
        out.append(row)
    return _to_tensor(batch, rows, out)


def ktae_loop(batch, config) -> torch.Tensor:
    from scipy.stats import fisher_exact

    rows = _rows(batch)
    R = batch.scores[config.channel].tolist()
    groups = batch.group_ids.tolist()
    z = _z(batch, config)
    toks = batch.token_ids.tolist()
    out = []
    for i, cols in enumerate(rows):
        mates = [j for j in range(len(R)) if groups[j] == groups[i]]
        mean = sum(R[j] for j in mates) / len(mates)
        correct = {j: R[j] > mean for j in mates}
        n1 = sum(correct.values())
        n0 = len(mates) - n1
        row = []
        for t in cols:
            v = toks[i][t]
            if n1 == 0 or n0 == 0:
                row.append(z[i])
                continue
            has = {j: v in [toks[j][s] for s in rows[j]] for j in mates}
            a = sum(1 for j in mates if has[j] and correct[j])
            c = sum(1 for j in mates if has[j] and not correct[j])
            p = fisher_exact([[a, n1 - a], [c, n0 - c]], alternative="two-sided").pvalue
            n, k = n1 + n0, a + c

            def h2(q):
                return 0.0 if q <= 0 or q >= 1 else -(q * math.log2(q) + (1 - q) * math.log2(1 - q))

            hc = h2(n1 / n)
            cond = (k / n) * (h2(a / k) if k else 0.0)
            cond += ((n - k) / n) * (h2((n1 - a) / (n - k)) if n - k else 0.0)
            ig = min(max((hc - cond) / hc, 0.0), 1.0) if hc > 0 else 0.0
            h = 2 * math.asin(math.sqrt(a / n1)) - 2 * math.asin(math.sqrt(c / n0))
            key = math.copysign(1.0, h) * abs(h) / math.pi * ((1 - min(p, 1.0)) + ig) / 2 if h != 0 else 0.0
            row.append(z[i] + config.scale * key)
        out.append(row)
    return _to_tensor(batch, rows, out)


def _features_loop(batch, i, cols):
    """Per-token feature rows, mirroring features.token_features (order of columns included)."""
    L = len(cols)
    feats = []
    for k, t in enumerate(cols):
        x = []
        if batch.entropies is not None:
            x.append(float(batch.entropies[i, t]))
        if batch.logprobs is not None:
            x.append(-float(batch.logprobs[i, t]))
        x.append((k + 1) / L)
        if batch.tokens is not None:
            cls = classify_token(batch.tokens[i][k])
            x += [1.0 if cls == c else 0.0 for c in range(1, 7)]
        for name in ("decision_signal", "style_flags"):
            e = batch.extras.get(name)
            if e is not None and e.dim() == 2:
                x.append(float(e[i, t]))
        feats.append(x)
    return feats


def _folds(batch, folds):
    from backend.estimators.features import group_folds

    fold, k = group_folds(batch, folds)
    return fold.tolist(), k


def token_rm_mlp_phi_loop(batch, config, feats, z, fold, k) -> list[list[float]]:
    """phi per real token from k MLPs trained one fold at a time, each response's sum built token by
    token (the fast path trains the k models at once over padded tensors)."""
    from backend.estimators.learned import MLP_LEARNING_RATE, mlp_fit_rows, mlp_init

    flat = np.array([x for f in feats for x in f], dtype=np.float64)
    mu, sd = flat.mean(0), flat.std(0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    xs = [torch.tensor((np.array(f, dtype=np.float64) - mu) / sd) for f in feats]
    init = mlp_init(k, flat.shape[1], config.hidden)
    fit_rows = mlp_fit_rows(batch.response_mask).tolist()
    models = []
    for j in range(k):
        p = {n: v[j].clone().requires_grad_() for n, v in init.items()}
        train = [i for i in fit_rows if fold[i] != j]
        opt = torch.optim.Adam(list(p.values()), lr=MLP_LEARNING_RATE)
        for _ in range(config.steps):
            opt.zero_grad()
            loss = torch.zeros((), dtype=torch.float64)
            for i in train:
                total = torch.zeros((), dtype=torch.float64)
                for x in xs[i]:
                    total = total + torch.tanh(x @ p["W1"] + p["b1"]) @ p["w2"] + p["b2"]
                loss = loss + (total - z[i]) ** 2
            n = max(len(train), 1)
            loss = loss / n + config.ridge / n * ((p["W1"] ** 2).sum() + (p["w2"] ** 2).sum())
            loss.backward()
            opt.step()
        models.append({n: v.detach() for n, v in p.items()})
    out = []
    for i, x in enumerate(xs):
        m = models[fold[i]]
        out.append([float(torch.tanh(row @ m["W1"] + m["b1"]) @ m["w2"] + m["b2"]) for row in x])
    return out


def token_rm_loop(batch, config) -> torch.Tensor:
    rows = _rows(batch)
    z = _z(batch, config)
    fold, k = _folds(batch, config.folds)
    feats = [_features_loop(batch, i, c) for i, c in enumerate(rows)]
    if getattr(config, "head", "linear") == "mlp" and k >= 2:
        phis = token_rm_mlp_phi_loop(batch, config, feats, z, fold, k)
        r_rows = [[p + (z[i] - sum(phi)) / len(phi) for p in phi] for i, phi in enumerate(phis)]
        return _finish(batch, config, z, rows, r_rows)
    sums = np.array([np.sum(f, axis=0) for f in feats], dtype=np.float64)
    r_rows = []
    for i, cols in enumerate(rows):
        L = len(cols)
        train = [j for j in range(len(rows)) if fold[j] != fold[i]]
        # standardization uses every response (labels are not involved), as the fast path does
        mu, sd = sums.mean(0), sums.std(0)
        sd = np.where(sd > 1e-12, sd, 1.0)
        Xa = np.concatenate([(sums[train] - mu) / sd, np.ones((len(train), 1))], axis=1)
        pen = np.eye(Xa.shape[1]) * config.ridge
        pen[-1, -1] = 1e-9
        coef = np.linalg.solve(Xa.T @ Xa + pen, Xa.T @ np.array([z[j] for j in train]))
        w, b = coef[:-1] / sd, coef[-1] - float(np.sum(coef[:-1] / sd * mu))
        phi = [float(np.dot(w, x)) + b / L for x in feats[i]]
        r_rows.append([p + (z[i] - sum(phi)) / L for p in phi])
    return _finish(batch, config, z, rows, r_rows)


def rudder_g_loop(batch, config) -> list[list[float]]:
    """g(y_{<=t}) per real token (fit over all prefixes, cross-fitted), as plain loops over prefixes."""
    rows = _rows(batch)
    z = _z(batch, config)
    fold, k = _folds(batch, config.folds)
    prefixes, owner = [], []
    for i, cols in enumerate(rows):
        feats = _features_loop(batch, i, cols)
        run = np.zeros(len(feats[0]) if feats else 0)
        for kk, x in enumerate(feats):
            run = run + np.array(x)
            prefixes.append(list(run / (kk + 1)) + [(kk + 1) / len(cols)])
            owner.append(i)
    P = np.array(prefixes, dtype=np.float64)
    mu, sd = P.mean(0), P.std(0)
    sd = np.where(sd > 1e-12, sd, 1.0)
    Xa = np.concatenate([(P - mu) / sd, np.ones((len(P), 1))], axis=1)
    y = np.array([z[o] for o in owner])
    coefs = {}
    for f in set(fold):
        train = np.array([fold[o] != f for o in owner])
        pen = np.eye(Xa.shape[1]) * config.ridge
        pen[-1, -1] = 1e-9
        coefs[f] = np.linalg.solve(Xa[train].T @ Xa[train] + pen, Xa[train].T @ y[train])
    g = [[] for _ in rows]
    for n, o in enumerate(owner):
        g[o].append(float(Xa[n] @ coefs[fold[o]]))
    return g


def rudder_loop(batch, config) -> torch.Tensor:
    rows = _rows(batch)
    z = _z(batch, config)
    g = rudder_g_loop(batch, config)
    r_rows = []
    for i, gi in enumerate(g):
        r = [gi[k] - (gi[k - 1] if k else 0.0) for k in range(len(gi))]
        if r:
            r[-1] += z[i] - gi[-1]
        r_rows.append(r)
    return _finish(batch, config, z, rows, r_rows)


def _base(batch, config):
    return reference_advantages(config.base, batch, None)


def modifier_loop(name, batch, config) -> torch.Tensor:
    rows = _rows(batch)
    out = torch.zeros(batch.response_mask.shape)
    if name == "gtpo":
        z = _z(batch, config)
        H = _entropy_rows(batch, rows)
        for sign in (1, -1):
            vals = [h for i, c in enumerate(rows) if (z[i] > 0) - (z[i] < 0) == sign for h in H[i]]
            if not vals:
                continue
            mean = sum(vals) / len(vals)
            var = sum((v - mean) ** 2 for v in vals) / max(len(vals) - 1, 1) if len(vals) > 1 else 0.0
            for i, cols in enumerate(rows):
                if (z[i] > 0) - (z[i] < 0) != sign:
                    continue
                for k, t in enumerate(cols):
                    a = z[i] + config.beta * (H[i][k] - mean) / math.sqrt(var + 1e-8)
                    if config.keep_sign:
                        a = max(a, 0.0) if sign > 0 else min(a, 0.0)
                    out[i, t] = a
        return out
    base = _base(batch, config)
    if name == "entropy_gate":
        H = _entropy_rows(batch, rows)
        for i, cols in enumerate(rows):
            thr = _quantile(H[i], config.q)
            for k, t in enumerate(cols):
                out[i, t] = base[i, t] * (config.factor if H[i][k] >= thr else 1.0)
    elif name == "stare":
        pos = [(i, t) for i, c in enumerate(rows) for t in c if base[i, t] > 0]
        s = sorted(-float(batch.logprobs[i, t]) for i, t in pos)
        n_top = math.ceil(config.top_p * len(s))
        thr = s[len(s) - n_top] if n_top and s else math.inf
        for i, cols in enumerate(rows):
            for t in cols:
                boost = base[i, t] > 0 and -float(batch.logprobs[i, t]) >= thr
                out[i, t] = base[i, t] * (config.weight if boost else 1.0)
    elif name == "tepo_mask":
        for i, cols in enumerate(rows):
            for t in cols:
                if "old_entropies" in batch.extras and batch.entropies is not None:
                    fell = float(batch.entropies[i, t]) < float(batch.extras["old_entropies"][i, t])
                else:
                    fell = float(batch.logprobs[i, t]) > float(batch.ref_logprobs[i, t])
                out[i, t] = base[i, t] * (config.scale if base[i, t] > 0 and fell else 1.0)
    elif name == "aggregation":
        B = len(rows)
        N = sum(len(c) for c in rows)
        L_max = max(len(c) for c in rows)
        for i, cols in enumerate(rows):
            c = {"seq-mean-token-mean": 1 / (B * max(len(cols), 1)), "token-mean": 1 / N,
                 "seq-mean-token-sum": 1 / B, "dr-grpo": 1 / L_max}[config.mode]
            for t in cols:
                out[i, t] = base[i, t] * c * (N if config.normalize else 1)
    return out


# ---- dispatch ----------------------------------------------------------------------------------------

_CREDIT = ("terminal_gae", "recency", "early_late", "entropy", "high_entropy_mask", "step_boundary",
           "trace", "s_trace", "hapo")


def reference_advantages(name: str, batch: RolloutBatch, config=None) -> torch.Tensor:
    """The loop twin of registered estimator `name`: advantages (B, T) on CPU."""
    from backend.estimators import registry

    batch = batch.to("cpu")
    if config is None:
        config = registry.make_config(name)
    rows = _rows(batch)
    if name in ("grpo", "dr_grpo", "rloo"):
        outcome = name if name != "grpo" or config.norm_by_std else "dr_grpo"
        z = outcome_loop(batch.scores[config.channel].tolist(), batch.group_ids.tolist(), outcome,
                         getattr(config, "epsilon", 1e-6))
        return _to_tensor(batch, rows, [[z[i]] * len(c) for i, c in enumerate(rows)])
    if name in _CREDIT:
        return redistribute_loop(batch, config, credit_weights_loop(name, batch, config))
    if name == "gae":
        z = _z(batch, config)
        r_rows = [[z[i] if k == len(c) - 1 else 0.0 for k in range(len(c))] for i, c in enumerate(rows)]
        v_rows = _values_rows(batch, config, z, rows)
        return _to_tensor(batch, rows, _gae_rows(batch, r_rows, v_rows, config.gamma, config.lam))
    if name == "prefix_tree":
        z = _z(batch, config)
        vb, va, br = prefix_tree_loop(batch, z)
        per_row = [[z[i] + config.eta * (va[i][k] - vb[i][k] if br[i][k] else 0.0) for k in range(len(c))]
                   for i, c in enumerate(rows)]
        return _to_tensor(batch, rows, per_row)
    if name == "suffix_mc":
        return suffix_mc_loop(batch, config)
    if name == "ktae":
        return ktae_loop(batch, config)
    if name == "token_rm":
        return token_rm_loop(batch, config)
    if name == "rudder":
        return rudder_loop(batch, config)
    return modifier_loop(name, batch, config)
