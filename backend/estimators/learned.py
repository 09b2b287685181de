"""Learned token credit (ESTIMATORS.md section 6): token_rm, rudder, ktae.

The regressions are small ridge fits on cheap token features (`features.py`), cross-fitted by group
so the credit of a response never comes from a model that saw it. All three are credit operators:
they produce token rewards r with sum_t r_t = Z exactly (KTAE: a per-token bonus on top of Z).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.batch import RolloutBatch
from backend.estimators import features, masked
from backend.estimators.common import CreditConfig, finish_rewards, outcome_z, scores_of
from backend.estimators.registry import EstimatorResult, param, register

MAX_FIT_TOKENS = 65536


@dataclass(frozen=True)
class TokenRMConfig(CreditConfig):
    """Token reward model: phi_t = f(x_t) fitted so that sum_t phi_t predicts Z, then projected; f is
    linear (a ridge fit) or a small MLP."""

    ridge: float = param(1.0, low=0.0, high=1e6, help="Ridge penalty (linear: L2 on w; mlp: weight decay)")
    folds: int = param(5, low=2, high=20, help="Cross-fitting folds (by group)")
    head: str = param("linear", choices=("linear", "mlp"),
                      help="linear: ridge on the features; mlp: one hidden tanh layer, trained with Adam")
    hidden: int = param(8, low=1, high=256, help="Hidden units of the MLP head")
    steps: int = param(150, low=1, high=5000, help="Full-batch Adam steps of the MLP head")

    def scope(self) -> str:
        return "run"  # the model is cross-fitted over the groups of the whole run


@register("token_rm", TokenRMConfig,
          "Token reward model (linear or MLP head) on token features, projected to sum to Z",
          family="learned")
def token_rm(batch: RolloutBatch, config: TokenRMConfig) -> EstimatorResult:
    """Features: entropy, surprisal, position, token class, and extras decision_signal / style_flags when
    present, plus a constant (its sum is L). Ridge of Z on the per-response feature sums, cross-fitted by
    group; then `r_t = phi_t + (Z - sum_k phi_k) / L` so sum_t r_t = Z exactly."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    X, names = features.token_features(batch)  # (B, T, F)
    L = mask.sum(dim=1, keepdim=True).clamp(min=1).to(torch.float32)  # (B, 1)
    fold, k = features.group_folds(batch, config.folds)
    note = None
    if k < 2:
        phi = torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
        note = "token_rm needs at least two groups to cross-fit; used phi = 0 (uniform r = Z / L)"
    elif config.head == "mlp":
        phi = mlp_token_rewards(X, mask, z, fold, k, config.ridge, config.hidden, config.steps)
    else:
        S = X.sum(dim=1)  # (B, F) per-response feature sums
        W, b = features.ridge_folds(S, z, fold, k, config.ridge)
        phi = (X * W[fold][:, None, :]).sum(-1) + b[fold][:, None] / L  # (B, T) the intercept per token
        phi = torch.where(mask, phi, 0.0)
    r = phi + (z[:, None] - phi.sum(dim=1, keepdim=True)) / L  # (B, T) sums to Z
    return finish_rewards(batch, config, z, r, {"phi": phi, "features": names, "fallback": note})


MLP_FIT_TOKENS = 8192
MLP_LEARNING_RATE = 0.01


def mlp_fit_rows(mask: torch.Tensor, max_tokens: int = MLP_FIT_TOKENS) -> torch.Tensor:
    """Rows (whole responses) the MLP head trains on: all of them, or evenly strided ones holding about
    `max_tokens` tokens (training cost is per token and step; prediction still covers every row)."""
    B = mask.shape[0]
    tokens = int(mask.sum())
    keep = B if tokens <= max_tokens else max(1, B * max_tokens // max(tokens, 1))
    return features.subsample_rows(B, keep, mask.device)


def mlp_init(k: int, F: int, H: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Initial weights of the k fold models, float64: W1 (k, F, H) ~ N(0, 1/F), w2 (k, H) ~ N(0, 1/H)
    scaled by 0.1, biases 0; drawn on the CPU from one seeded generator (the same on any device)."""
    gen = torch.Generator().manual_seed(seed)
    W1 = torch.randn((k, F, H), generator=gen, dtype=torch.float64) / F ** 0.5
    w2 = torch.randn((k, H), generator=gen, dtype=torch.float64) * 0.1 / H ** 0.5
    return {"W1": W1, "b1": torch.zeros((k, H), dtype=torch.float64), "w2": w2,
            "b2": torch.zeros(k, dtype=torch.float64)}


def mlp_token_rewards(X: torch.Tensor, mask: torch.Tensor, z: torch.Tensor, fold: torch.Tensor, k: int,
                      ridge: float, hidden: int, steps: int) -> torch.Tensor:
    """phi: (B, T) float32 from k cross-fitted MLPs `phi = w2 . tanh(W1^T x + b1) + b2`, 0 on padding.

    X: (B, T, F) features, standardized here over every real token (no labels involved); z: (B,).
    Model j trains on the responses outside fold j (of the `mlp_fit_rows`) to minimise
    `mean_i (sum_t phi_it - z_i)^2 + ridge / n_j (|W1|^2 + |w2|^2)` by `steps` full-batch Adam steps
    (lr 0.01), all k models at once in float64; response i is then scored by model fold(i).
    """
    device = X.device
    real = X[mask].to(torch.float64)  # (N, F)
    mu, sd = real.mean(0), real.std(0, unbiased=False)
    sd = torch.where(sd > 1e-12, sd, torch.ones_like(sd))
    Xs = torch.where(mask[..., None], (X.to(torch.float64) - mu) / sd, 0.0)  # (B, T, F)
    params = {n: p.to(device).requires_grad_() for n, p in mlp_init(k, X.shape[-1], hidden).items()}
    rows = mlp_fit_rows(mask)
    fit_mask = mask[rows]
    tok_row, tok_col = fit_mask.nonzero(as_tuple=True)  # real tokens of the fit rows only: (N,)
    Xf = Xs[rows][tok_row, tok_col]  # (N, F)
    zf, ff = z[rows].to(torch.float64), fold[rows]
    n = len(rows)
    train = (ff[None, :] != torch.arange(k, device=device)[:, None]).to(torch.float64)  # (k, n)
    n_train = train.sum(1).clamp(min=1)  # (k,)
    opt = torch.optim.Adam(list(params.values()), lr=MLP_LEARNING_RATE)
    with torch.enable_grad():
        for _ in range(steps):
            opt.zero_grad()
            h = torch.tanh(torch.matmul(Xf, params["W1"]) + params["b1"][:, None, :])  # (k, N, H)
            phi = (h @ params["w2"][:, :, None])[..., 0] + params["b2"][:, None]  # (k, N)
            pred = torch.zeros((k, n), dtype=torch.float64, device=device).index_add(1, tok_row, phi)
            fit = (train * (pred - zf[None]) ** 2).sum(1) / n_train  # (k,) pred: (k, n) response sums
            decay = ridge / n_train * ((params["W1"] ** 2).sum((1, 2)) + (params["w2"] ** 2).sum(1))
            (fit + decay).sum().backward()
            opt.step()
    with torch.no_grad():
        W1, b1, w2, b2 = (params[n][fold] for n in ("W1", "b1", "w2", "b2"))  # per response
        h = torch.tanh(torch.einsum("btf,bfh->bth", Xs, W1) + b1[:, None, :])  # (B, T, H)
        phi = torch.einsum("bth,bh->bt", h, w2) + b2[:, None]  # (B, T)
    return torch.where(mask, phi, 0.0).to(torch.float32)


@dataclass(frozen=True)
class RudderConfig(CreditConfig):
    """RUDDER-style return decomposition with a linear prefix-return predictor g."""

    ridge: float = param(1.0, low=0.0, high=1e6, help="Ridge penalty")
    folds: int = param(5, low=2, high=20, help="Cross-fitting folds (by group)")

    def scope(self) -> str:
        return "run"  # the model is cross-fitted over the groups of the whole run


@register("rudder", RudderConfig, "Return decomposition: r_t = g(y<=t) - g(y<t), residual on the last token",
          family="learned")
def rudder(batch: RolloutBatch, config: RudderConfig) -> EstimatorResult:
    """g(y_{<=t}) is a ridge on the running mean of the token features up to t and the relative position,
    fitted on every prefix to predict Z (cross-fitted by group). g(empty prefix) = 0, the group baseline
    in Z units; the residual Z - g(y_{<=L}) goes on the last token, so sum_t r_t = Z exactly."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    X, names = features.token_features(batch)  # (B, T, F)
    k_pos = (masked.positions(mask) + 1).clamp(min=1).to(torch.float32)  # (B, T)
    L = mask.sum(dim=1, keepdim=True).clamp(min=1).to(torch.float32)
    prefix = torch.cat([X.cumsum(dim=1) / k_pos[..., None], (k_pos / L)[..., None]], dim=-1)  # (B, T, F+1)
    fold, k = features.group_folds(batch, config.folds)
    g = torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
    note = None
    if k < 2:
        note = "rudder needs at least two groups to cross-fit; used g = 0 (all of Z on the last token)"
    else:
        rows = mask.nonzero(as_tuple=True)
        P = prefix[rows]
        f_tok = fold[rows[0]]
        fit = features.subsample_rows(P.shape[0], MAX_FIT_TOKENS, batch.device)
        W, b = features.ridge_folds(P[fit], z[rows[0]][fit], f_tok[fit], k, config.ridge)
        g[rows] = (P * W[f_tok]).sum(-1) + b[f_tok]
    prev = masked.forward_fill_index(mask)  # (B, T) this token's index; shift to the previous real token
    prev = torch.cat([torch.full_like(prev[:, :1], -1), prev[:, :-1]], dim=1)
    g_prev = torch.where(prev >= 0, g.gather(1, prev.clamp(min=0)), 0.0)
    r = torch.where(mask, g - g_prev, 0.0)
    last = masked.last_index(mask)
    has = last >= 0
    g_last = g.gather(1, last.clamp(min=0)[:, None])[:, 0]
    residual = torch.where(has, z - g_last, 0.0)
    r = r.scatter_add(1, last.clamp(min=0)[:, None], residual[:, None])
    return finish_rewards(batch, config, z, r, {"g": torch.where(mask, g, 0.0), "features": names,
                                                "fallback": note})


@dataclass(frozen=True)
class KTAEConfig(CreditConfig):
    """KTAE: per group and token id, a key score K(v) in (-1, 1) from the correct/incorrect 2x2 table."""

    scale: float = param(1.0, low=0.0, high=10.0, help="Weight of the key score added to Z")


def key_scores(token_ids: torch.Tensor, mask: torch.Tensor, group_ids: torch.Tensor,
               correct: torch.Tensor) -> torch.Tensor:
    """K(y_{i,t}): (B, T) float32 key score of each token's id within its group, 0 on padding.

    Per (group, id): a = correct rollouts containing the id, c = incorrect ones; n1, n0 the group's
    correct/incorrect counts. Strength 1 - p of Fisher's exact test (two-sided), information gain of
    "contains id" about correctness (normalized by H(correct)), direction and size from Cohen's h
    between P(contains | correct) and P(contains | incorrect):
    `K = sign(h) |h| / pi * ((1 - p) + IG) / 2`. Groups that are all correct or all incorrect give 0.
    """
    B, T = mask.shape
    device = mask.device
    index, n_groups = masked.group_index(group_ids)
    rows, cols = mask.nonzero(as_tuple=True)
    tok = token_ids[rows, cols].long()
    vocab = int(tok.max()) + 1 if tok.numel() else 1
    pairs = torch.unique(rows * vocab + tok)  # (P,) each (rollout, id) present once
    p_row, p_tok = pairs // vocab, pairs % vocab
    gkey, inverse = torch.unique(index[p_row] * vocab + p_tok, return_inverse=True)  # (U,)
    corr = correct.to(torch.float64)
    a = torch.zeros(gkey.numel(), dtype=torch.float64, device=device).index_add_(0, inverse, corr[p_row])
    c = torch.zeros_like(a).index_add_(0, inverse, 1.0 - corr[p_row])
    g_of = gkey // vocab
    n1 = masked.group_sum(corr, index, n_groups)[g_of]
    n0 = masked.group_sum(1.0 - corr, index, n_groups)[g_of]
    n = n1 + n0
    k = a + c
    # Fisher exact test: hypergeometric log-probabilities of every table with the same margins.
    g_max = int(n.max()) if n.numel() else 0
    x = torch.arange(g_max + 1, dtype=torch.float64, device=device)[None, :]  # (1, G+1)

    def log_choose(top, bottom):
        return torch.lgamma(top + 1) - torch.lgamma(bottom + 1) - torch.lgamma(top - bottom + 1)

    lo = (k - n0).clamp(min=0)[:, None]
    hi = torch.minimum(k, n1)[:, None]
    support = (x >= lo) & (x <= hi)
    xs = torch.where(support, x, lo)
    logp = (log_choose(n1[:, None], xs) + log_choose(n0[:, None], k[:, None] - xs)
            - log_choose(n[:, None], k[:, None]))
    prob = torch.where(support, torch.exp(logp), 0.0)  # (U, G+1)
    p_obs = torch.exp(log_choose(n1, a) + log_choose(n0, c) - log_choose(n, k))
    p_value = torch.where(prob <= p_obs[:, None] * (1 + 1e-7), prob, 0.0).sum(1).clamp(max=1.0)

    def entropy2(p):
        p = p.clamp(0.0, 1.0)
        terms = -(p * torch.log2(p.clamp(min=1e-300))) - ((1 - p) * torch.log2((1 - p).clamp(min=1e-300)))
        return torch.where((p > 0) & (p < 1), terms, 0.0)

    h_c = entropy2(n1 / n.clamp(min=1))
    cond = (k / n.clamp(min=1)) * entropy2(a / k.clamp(min=1)) + ((n - k) / n.clamp(min=1)) * entropy2(
        (n1 - a) / (n - k).clamp(min=1))
    ig = torch.where(h_c > 0, (h_c - cond) / h_c.clamp(min=1e-12), 0.0).clamp(0.0, 1.0)
    h = 2 * torch.asin(torch.sqrt(a / n1.clamp(min=1))) - 2 * torch.asin(torch.sqrt(c / n0.clamp(min=1)))
    key = torch.sign(h) * h.abs() / torch.pi * ((1 - p_value) + ig) / 2
    key = torch.where((n1 > 0) & (n0 > 0), key, 0.0).to(torch.float32)  # (U,)
    # Back to tokens: every token's (group, id) is one of the unique keys.
    tok_key = index[rows] * vocab + tok
    pos = torch.searchsorted(gkey, tok_key)
    out = torch.zeros((B, T), dtype=torch.float32, device=device)
    out[rows, cols] = key[pos]
    return out


@register("ktae", KTAEConfig,
          "Key-token advantage: A = Z + K(token id) from per-group correct vs incorrect", family="learned")
def ktae(batch: RolloutBatch, config: KTAEConfig) -> EstimatorResult:
    """Correct means a score above the group mean (binary rewards: R = 1 in a mixed group)."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    R = scores_of(batch, config.channel)
    index, n_groups = masked.group_index(batch.group_ids)
    correct = R > masked.group_mean(R, index, n_groups)
    K = key_scores(batch.token_ids, mask, batch.group_ids, correct)
    adv = torch.where(mask, z[:, None] + config.scale * K, 0.0)
    r = adv / mask.sum(dim=1, keepdim=True).clamp(min=1)
    if config.then_gae:
        return finish_rewards(batch, config, z, r, {"key_score": K, "correct": correct})
    return EstimatorResult(adv, {"Z": z, "r": r, "key_score": K, "correct": correct})
