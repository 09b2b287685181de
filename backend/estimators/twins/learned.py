"""Twins of learned.py and learned_ktae.py: token_rm (linear and MLP heads), rudder and ktae, fitted and
applied one response, prefix or token at a time. The MLP's initial weights and row subsample are shared
with the fast path (they define the model); the training loop and every sum are written out here."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import torch

from backend.core.batch import RolloutBatch
from backend.estimators.loop_twins import twin
from backend.estimators.methods.learned import MAX_FIT_TOKENS, MLP_LEARNING_RATE, mlp_fit_rows, mlp_init
from backend.estimators.twins.common import finish_rewards_loop
from backend.estimators.twins.features import group_folds_loop, ridge_fold_fits, strided, token_feature_rows
from backend.estimators.twins.loops import outcome_of, real_columns, scores_list, to_tensor


def token_rm_mlp_phi_loop(batch, config, feats, z, fold, k) -> list[list[float]]:
    """phi per real token from k MLPs trained one fold at a time, each response's sum built token by
    token (the fast path trains the k models at once over padded tensors)."""
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


@twin("token_rm")
def token_rm_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """phi from a ridge of Z on per-response feature sums (or the MLP head), cross-fitted by group, then
    r_t = phi_t + (Z - sum phi) / L."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    fold, k = group_folds_loop(batch, config.folds)
    feats = [token_feature_rows(batch, i, c) for i, c in enumerate(rows)]
    if getattr(config, "head", "linear") == "mlp" and k >= 2:
        phis = token_rm_mlp_phi_loop(batch, config, feats, z, fold, k)
        r_rows = [[p + (z[i] - sum(phi)) / len(phi) for p in phi] for i, phi in enumerate(phis)]
        return finish_rewards_loop(batch, config, z, rows, r_rows)
    width = max((len(f[0]) for f in feats if f), default=0)
    sums = [list(np.sum(f, axis=0)) if f else [0.0] * width for f in feats]  # per-response feature sums
    fits = ridge_fold_fits(sums, z, fold, k, config.ridge) if k >= 2 else None
    r_rows = []
    for i, cols in enumerate(rows):
        L = len(cols)
        if fits is None:  # fewer than two groups: nothing to cross-fit on, phi = 0
            phi = [0.0] * L
        else:
            w, b = fits[fold[i]]
            phi = [float(np.dot(w, x)) + b / L for x in feats[i]]
        r_rows.append([p + (z[i] - sum(phi)) / L for p in phi])
    return finish_rewards_loop(batch, config, z, rows, r_rows)


def rudder_g_loop(batch, config) -> list[list[float]]:
    """g(y_{<=t}) per real token: a ridge fitted on every prefix (running mean of the token features up
    to t, and t/L) to its response's Z, cross-fitted by group; 0 with fewer than two groups."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    fold, k = group_folds_loop(batch, config.folds)
    prefixes, owner = [], []
    for i, cols in enumerate(rows):
        feats = token_feature_rows(batch, i, cols)
        running = [0.0] * (len(feats[0]) if feats else 0)
        for n, x in enumerate(feats):
            running = [a + b for a, b in zip(running, x, strict=True)]
            prefixes.append([v / (n + 1) for v in running] + [(n + 1) / len(cols)])
            owner.append(i)
    if k < 2 or not prefixes:  # nothing to cross-fit on, or no real token to fit (every response empty)
        return [[0.0] * len(cols) for cols in rows]
    g: list[list[float]] = [[] for _ in rows]
    fit = strided(len(prefixes), MAX_FIT_TOKENS)
    fits = ridge_fold_fits(
        [prefixes[n] for n in fit], [z[owner[n]] for n in fit], [fold[owner[n]] for n in fit], k, config.ridge
    )
    for x, i in zip(prefixes, owner, strict=True):
        w, b = fits[fold[i]]
        g[i].append(float(np.dot(w, x) + b))
    return g


@twin("rudder")
def rudder_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """r_t = g(y_{<=t}) - g(y_{<t}) with g(empty) = 0, the residual Z - g(y_{<=L}) on the last token."""
    rows = real_columns(batch)
    z = outcome_of(batch, config)
    g = rudder_g_loop(batch, config)
    r_rows = []
    for i, gi in enumerate(g):
        r = [gi[k] - (gi[k - 1] if k else 0.0) for k in range(len(gi))]
        if r:
            r[-1] += z[i] - gi[-1]
        r_rows.append(r)
    return finish_rewards_loop(batch, config, z, rows, r_rows)


def _fisher_loop(a: int, b: int, c: int, d: int) -> tuple[float, bool]:
    """Two-sided Fisher exact p of [[a, b], [c, d]] in exact integer arithmetic: the tables with the same
    margins whose hypergeometric probability does not exceed the observed one, compared as integers
    C(C1, k) C(n - C1, R1 - k). Returns (p, p_is_one): p = 1 exactly when every table is counted."""
    R1, C1, n = a + b, a + c, a + b + c + d

    def weight(k: int) -> int:  # the probability times C(n, R1), an integer
        return math.comb(C1, k) * math.comb(n - C1, R1 - k)

    observed = weight(a)
    support = range(max(0, R1 + C1 - n), min(R1, C1) + 1)
    counted = [weight(k) for k in support if weight(k) <= observed]
    if len(counted) == len(support):
        return 1.0, True
    return float(Fraction(sum(counted), math.comb(n, R1))), False


def _h2_terms(p: float) -> float:
    return -p * math.log2(p) if p > 0 else 0.0


@twin("ktae")
def ktae_twin(batch: RolloutBatch, config) -> torch.Tensor:
    """KTAE from the official code's definitions, one group and one token id at a time."""
    rows = real_columns(batch)
    R = scores_list(batch, config.channel)
    groups = batch.group_ids.tolist()
    z = outcome_of(batch, config)
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
            p, p_is_one = _fisher_loop(a, b, c, d)
            F = 0.0 if p_is_one else math.exp(-2 * p)
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
    return to_tensor(batch, rows, out)
