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
    """Z per response, from the formulas of section 1. A missing score (NaN) is left out of its group's
    statistics and gets Z = 0; a group of several with fewer than two scores gets Z = 0 (TRL)."""
    cs = _center_scale(scores, groups, outcome, eps)
    return [0.0 if math.isnan(float(scores[i])) else (float(scores[i]) - c) * k
            for i, (c, k) in enumerate(cs)]


def _center_scale(scores, groups, outcome, eps):
    members: dict = defaultdict(list)
    for i, g in enumerate(groups):
        members[g].append(i)
    out = [(0.0, 1.0)] * len(scores)
    for idx in members.values():
        scored = [i for i in idx if not math.isnan(float(scores[i]))]
        vals = [float(scores[i]) for i in scored]
        n = len(vals)
        mean = sum(vals) / n if n else 0.0
        for i in idx:
            if len(idx) == 1:
                out[i] = (0.0, 1.0 if n else 0.0)
            elif i not in scored or n < 2:
                out[i] = (mean, 0.0)
            elif outcome == "grpo":
                std = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
                out[i] = (mean, 0.0 if max(vals) == min(vals) else 1.0 / (std + eps))
            elif outcome == "dr_grpo":
                out[i] = (mean, 1.0)
            else:
                out[i] = ((sum(vals) - float(scores[i])) / (n - 1), 1.0)
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
            elif name == "step_boundary":
                text = batch.tokens[i][k] if batch.tokens is not None else ""
                w.append(1.0 if t == L or re.search(config.pattern, text) else 0.0)
            elif name in ("decaying_trace", "entropy_masked_trace"):
                d = config.trace_gamma * config.trace_lam
                x = d ** (L - t)
                if config.mode == "both":
                    x = 0.5 * (x + d ** (t - 1))
                if name == "entropy_masked_trace":
                    x *= 1.0 if H[k] >= _quantile(H, config.q) else 0.0
                w.append(x)
            elif name == "entropy_mix":
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
        grp = [R[j] for j in range(len(R)) if groups[j] == groups[i] and not math.isnan(R[j])]
        root = sum(grp) / len(grp) if grp else 0.0
        valued = [t for t in cols if float(mm[i, t]) > 0.5]
        row = []
        for t in cols:
            before = [s for s in valued if s <= t]
            after = [s for s in valued if s > t]
            v_cur = float(mc[i, before[-1]]) if before else root
            v_next = float(mc[i, after[0]]) if after else R[i]
            row.append(0.0 if cs[i][1] == 0.0 else cs[i][1] * (v_next - v_cur))
        out.append(row)
    return _to_tensor(batch, rows, out)


def _log_comb32(n: float, k: float) -> torch.Tensor:
    n, k = torch.tensor(n, dtype=torch.float32), torch.tensor(k, dtype=torch.float32)
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


def _fisher_loop(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher exact p of [[a, b], [c, d]] summed over the tables with the same margins whose
    hypergeometric probability (float32, as the official code) does not exceed the observed one."""
    R1, C1, n = a + b, a + c, a + b + c + d

    def prob(k):
        return torch.exp(_log_comb32(C1, k) + _log_comb32(n - C1, R1 - k) - _log_comb32(n, R1))

    p_obs = prob(a)
    total = torch.tensor(0.0, dtype=torch.float32)
    for k in range(max(0, R1 + C1 - n), min(R1, C1) + 1):
        p_k = prob(k)
        if p_k <= p_obs:
            total = total + p_k
    return float(total)


def _h2_terms(p: float) -> float:
    return -p * math.log2(p) if p > 0 else 0.0


def ktae_loop(batch, config) -> torch.Tensor:
    """KTAE from the official code's definitions, one group and one token id at a time."""
    rows = _rows(batch)
    R = batch.scores[config.channel].tolist()
    groups = batch.group_ids.tolist()
    z = _z(batch, config)
    toks = batch.token_ids.tolist()
    seqs = [[toks[i][t] for t in c] for i, c in enumerate(rows)]
    out = []
    for i, cols in enumerate(rows):
        mates = [j for j in range(len(R)) if groups[j] == groups[i]]
        good = [j for j in mates if R[j] > 0]
        bad = [j for j in mates if R[j] <= 0]
        row = []
        for k in range(len(cols)):
            v = seqs[i][k]
            if not good or not bad or v == config.eos_token_id:
                row.append(z[i])
                continue
            a = sum(1 for j in good if v in seqs[j])
            b = sum(1 for j in bad if v in seqs[j])
            c, d = len(good) - a, len(bad) - b
            n = a + b + c + d
            p = _fisher_loop(a, b, c, d)
            F = math.exp(-2 * p) if p != 1.0 else 0.0
            h_y = _h2_terms((a + c) / n) + _h2_terms((b + d) / n)
            h_yx = ((a + b) / n) * (_h2_terms(a / (a + b)) + _h2_terms(b / (a + b)) if a + b else 0.0)
            h_yx += ((c + d) / n) * (_h2_terms(c / (c + d)) + _h2_terms(d / (c + d)) if c + d else 0.0)
            ig = h_y - h_yx
            x = math.asin(math.sqrt(a / (a + c + 1e-10))) - math.asin(math.sqrt(b / (b + d + 1e-10)))
            if config.use_tf:
                tot_c = sum(len(seqs[j]) for j in good)
                tot_w = sum(len(seqs[j]) for j in bad)
                avg = (tot_c + tot_w) / 2
                fc = sum(seqs[j].count(v) for j in good) / tot_c if tot_c else 0.0
                fw = sum(seqs[j].count(v) for j in bad) / tot_w if tot_w else 0.0
                tf_c = fc * 3.0 / (fc + 2.0 * (0.5 + 0.5 * tot_c / avg))
                tf_w = fw * 3.0 / (fw + 2.0 * (0.5 + 0.5 * tot_w / avg))
                x += tf_c / (tf_w + 1e-5) - tf_w / (tf_c + 1e-5)
            key = (config.alpha * F + config.beta_ig * ig) * x / (config.alpha + config.beta_ig)
            row.append(z[i] + config.scale * math.tanh(key / 2))  # (sigmoid(x) - 1/2) * 2 = tanh(x / 2)
        out.append(row)
    return _to_tensor(batch, rows, out)


def high_entropy_mask_loop(batch, config) -> torch.Tensor:
    rows = _rows(batch)
    z = _z(batch, config)
    H = _entropy_rows(batch, rows)
    if config.quantile_over == "batch":
        every = [h for row in H for h in row]
        thresholds = [_quantile(every, config.q) if every else math.inf] * len(rows)
    else:
        thresholds = [_quantile(h, config.q) if h else math.inf for h in H]
    return _to_tensor(batch, rows, [[z[i] if h >= thresholds[i] else 0.0 for h in H[i]]
                                    for i in range(len(rows))])


def masked_trace_loop(batch, config) -> torch.Tensor:
    rows = _rows(batch)
    z = _z(batch, config)
    r_rows = []
    for i, w in enumerate(credit_weights_loop("entropy_masked_trace", batch, config)):
        L = len(w)
        if not sum(w) > 0:
            w = [1.0] * L
        total = sum(w)
        r_rows.append([z[i] * min(L * x / total, config.cap) / L for x in w])
    return _finish(batch, config, z, rows, r_rows)


def gtpo_loop(batch, config) -> torch.Tensor:
    """GTPO per group and position, from the paper's Eq. 3, 5 and our reading of Eq. 6."""
    rows = _rows(batch)
    R = batch.scores[config.channel].tolist()
    groups = batch.group_ids.tolist()
    H = _entropy_rows(batch, rows)
    out = [[0.0] * len(c) for c in rows]
    for g in set(groups):
        mates = [i for i in range(len(R)) if groups[i] == g]
        shaped = {i: [0.0] * len(rows[i]) for i in mates}
        for sign in (1, -1):
            members = [i for i in mates if (R[i] > config.correct_above) == (sign > 0)]
            for t in range(max((len(rows[i]) for i in mates), default=0)):
                alive = [i for i in members if len(rows[i]) > t]
                if sign > 0:
                    vals = {i: H[i][t] for i in alive}
                else:
                    vals = {i: 1.0 / max(H[i][t], config.entropy_floor) for i in alive}
                total = sum(vals.values())
                for i in alive:
                    share = vals[i] / total if total > 0 else 1.0 / len(alive)
                    shaped[i][t] = sign * (config.alpha1 + config.alpha2 * share * len(alive))
            # Eq. 6: this set's shaped rewards, 0 on the other set's tokens, over all tokens of the group
            pool = [shaped[i][t] if i in members else 0.0 for i in mates for t in range(len(rows[i]))]
            if len(pool) < 2:
                continue
            mean = sum(pool) / len(pool)
            std = math.sqrt(sum((x - mean) ** 2 for x in pool) / (len(pool) - 1))
            for i in members:
                out[i] = [(x - mean) / (std + config.epsilon) if std > 0 else 0.0 for x in shaped[i]]
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
        return gtpo_loop(batch, config)
    base = _base(batch, config)
    if name == "entropy_gate":
        H = _entropy_rows(batch, rows)
        for i, cols in enumerate(rows):
            thr = _quantile(H[i], config.q)
            for k, t in enumerate(cols):
                out[i, t] = base[i, t] * (config.factor if H[i][k] >= thr else 1.0)
    elif name == "stare":
        H = _entropy_rows(batch, rows)
        n_tok = sum(len(c) for c in rows)
        gate = (sum(map(sum, H)) / max(n_tok, 1)) < config.target_entropy
        weights = {}
        for sign, w in ((1, config.weight), (-1, config.weight_neg if config.variant == "C2" else None)):
            cand = [(i, t) for i, c in enumerate(rows) for t in c if sign * float(base[i, t]) > 0]
            if w is None or not cand or config.top_p <= 0:
                continue
            k = min(max(1, int(len(cand) * config.top_p + 0.999999)), len(cand))
            # highest surprisal (lowest logprob) first
            ranked = sorted(cand, key=lambda it: float(batch.logprobs[it[0], it[1]]))
            for it in ranked[:k]:
                weights[it] = w if gate else 1.0
        for i, cols in enumerate(rows):
            for t in cols:
                out[i, t] = base[i, t] * weights.get((i, t), 1.0)
    elif name == "entropy_drop_mask":
        old = batch.extras["old_entropies"]
        for i, cols in enumerate(rows):
            for t in cols:
                fell = float(batch.entropies[i, t]) < float(old[i, t])
                out[i, t] = base[i, t] * (config.scale if base[i, t] > 0 and fell else 1.0)
    elif name == "aggregation":
        B = max(sum(1 for c in rows if c), 1)
        N = sum(len(c) for c in rows)
        budget = config.l_budget or batch.response_mask.shape[1]
        for i, cols in enumerate(rows):
            c = {"seq-mean-token-mean": 1 / (B * max(len(cols), 1)), "token-mean": 1 / max(N, 1),
                 "seq-mean-token-sum": 1 / B, "dr-grpo": 1 / (B * budget)}[config.mode]
            for t in cols:
                out[i, t] = base[i, t] * c * (max(N, 1) if config.normalize else 1)
    return out


# ---- dispatch ----------------------------------------------------------------------------------------

_CREDIT = ("terminal_gae", "recency", "early_late", "entropy", "step_boundary", "decaying_trace",
           "entropy_mix")


def reference_advantages(name: str, batch: RolloutBatch, config=None) -> torch.Tensor:
    """The loop twin of registered estimator `name`: advantages (B, T) on CPU."""
    from backend.estimators import registry

    batch = batch.to("cpu")
    name = registry.canonical(name)
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
    if name == "high_entropy_mask":
        return high_entropy_mask_loop(batch, config)
    if name == "entropy_masked_trace":
        return masked_trace_loop(batch, config)
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
    if name == "logged":
        logged = batch.extras["logged_advantage"].tolist()
        return _to_tensor(batch, rows, [[0.0 if math.isnan(logged[i]) else logged[i]] * len(c)
                                        for i, c in enumerate(rows)])
    if name == "ktae":
        return ktae_loop(batch, config)
    if name == "token_rm":
        return token_rm_loop(batch, config)
    if name == "rudder":
        return rudder_loop(batch, config)
    if name in ("oar_p", "oar_g"):
        return oar_loop(name, batch, config)
    if name == "gcpo":
        return gcpo_loop(batch, config)
    return modifier_loop(name, batch, config)


# ---- model-based (OAR, GCPO): loops over the cached scores ---------------------------------------------

def oar_loop(name: str, batch: RolloutBatch, config) -> torch.Tensor:
    """OAR's bi-level weights per response, as the official code computes them (numpy, one response at a
    time), times Z; unscored tokens keep weight 1."""
    z = _z(batch, config)
    rows = _rows(batch)
    scores = batch.extras[f"{name}_scores"].tolist()
    scored = batch.extras[f"{name}_mask"].tolist()
    per_row = []
    for i, cols in enumerate(rows):
        keep = [c for c in cols if scored[i][c] > 0]
        weights = {c: 1.0 for c in cols}
        if keep:
            log_score = np.log1p(np.maximum(np.array([scores[i][c] for c in keep], dtype=np.float64), 0.0))
            lo, hi = log_score.min(), log_score.max()
            norm = (log_score - lo) / (hi - lo if hi > lo else 1.0)
            tau = np.quantile(norm, config.threshold)
            w = np.ones_like(norm)
            low = norm < tau
            w[low] = np.maximum(norm[low] / (tau + 1e-8), config.floor)
            w[~low] = 1.0 + config.beta * (norm[~low] - tau) / (1.0 - tau + 1e-8)
            if config.sum_to_length:
                w = np.ones_like(w) if w.sum() <= 0 else w * (len(w) / (w.sum() + 1e-8))
            weights.update(zip(keep, w.tolist(), strict=True))
        per_row.append([z[i] * weights[c] for c in cols])
    return _to_tensor(batch, rows, per_row)


def gcpo_loop(batch: RolloutBatch, config) -> torch.Tensor:
    """GCPO's "kl" divergence and "hist" weights per response, as the official loop computes them."""
    z = _z(batch, config)
    rows = _rows(batch)
    delta = batch.extras["gcpo_scores"].tolist()
    scored = batch.extras["gcpo_mask"].tolist()
    alpha = math.log(1.0 - config.mass) / math.log(1.0 - config.top) - 1.0
    per_row = []
    for i, cols in enumerate(rows):
        keep = [c for c in cols if scored[i][c] > 0]
        weights = {c: 1.0 for c in cols}
        if keep:
            diff = [min(max(delta[i][c], -20.0), 20.0) for c in keep]
            d = [min(max(math.exp(x) - x - 1.0, -10.0), 10.0) for x in diff]
            order = sorted(range(len(d)), key=lambda k: (d[k], k))
            pct = [0.0] * len(d)
            for rank, k in enumerate(order, start=1):
                pct[k] = rank / len(d)
            w = [p ** alpha for p in pct]
            total = sum(w)
            weights.update({c: w[k] / total * len(d) for k, c in enumerate(keep)})
        per_row.append([z[i] * weights[c] for c in cols])
    return _to_tensor(batch, rows, per_row)
