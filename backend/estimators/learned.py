"""Learned token credit (docs/estimators.md section 6): token_rm, rudder, ktae.

The regressions are small ridge fits on cheap token features (`features.py`), cross-fitted by group
so the credit of a response never comes from a model that saw it. All three are credit operators:
they produce token rewards r with sum_t r_t = Z exactly (KTAE: a per-token bonus on top of Z).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.batch import RolloutBatch
from backend.estimators import features, fitting, masked
from backend.estimators.common import CreditConfig, explain_rewards, finish_rewards, outcome_z
from backend.estimators.registry import EstimatorResult, param, register
from backend.estimators.token_helpers import scores_of

MAX_FIT_TOKENS = 65536


@dataclass(frozen=True)
class TokenRMConfig(CreditConfig):
    """Token reward model: phi_t = f(x_t) fitted so that sum_t phi_t predicts Z, then projected; f is
    linear (a ridge fit) or a small MLP."""

    ridge: float = param(1.0, low=0.0, high=1e6, help="Ridge penalty (linear: L2 on w; mlp: weight decay)")
    folds: int = param(5, low=2, high=20, help="Cross-fitting folds (by group)")
    head: str = param(
        "linear",
        choices=("linear", "mlp"),
        help="linear: ridge on the features; mlp: one hidden tanh layer, trained with Adam",
    )
    hidden: int = param(8, low=1, high=256, help="Hidden units of the MLP head")
    steps: int = param(150, low=1, high=5000, help="Full-batch Adam steps of the MLP head")

    def scope(self) -> str:
        # the model is cross-fitted over the groups of the whole run (a streamed run fits it in a first pass)
        return fitting.fit_scope()


@register(
    "token_rm",
    TokenRMConfig,
    "Token reward model (linear or MLP head) on token features, projected to sum to Z",
    family="learned",
    explain=explain_rewards,
)
def token_rm(batch: RolloutBatch, config: TokenRMConfig) -> EstimatorResult:
    """Features: entropy, surprisal, position, token class, and extras decision_signal / style_flags when
    present, plus a constant (its sum is L). Ridge of Z on the per-response feature sums, cross-fitted by
    group; then `r_t = phi_t + (Z - sum_k phi_k) / L` so sum_t r_t = Z exactly."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    X, names = features.token_features(batch)  # (B, T, F)
    L = mask.sum(dim=1, keepdim=True).clamp(min=1).to(torch.float32)  # (B, 1)
    fold, k = features.group_folds(batch, config.folds)
    note = model_note = None
    contributions = None  # the linear head's per-feature parts of phi (the explanation's terms)
    if k < 2:
        phi = torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
        note = "token_rm needs at least two groups to cross-fit; used phi = 0 (uniform r = Z / L)"
    elif config.head == "mlp":
        model = fitting.fitted(
            batch,
            ("token_rm_mlp", k, config.ridge, config.hidden, config.steps),
            lambda: MLPSample.of(batch, X, z, fold, tuple(names)),
            lambda sample: mlp_fit(sample, k, config.ridge, config.hidden, config.steps),
        )
        phi = (
            torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
            if model is None
            else mlp_apply(model, X, mask, fold)
        )
        model_note = fitting.sample_note(batch, "token_rm's MLP head", MLP_FIT_TOKENS, rows=True)
    else:
        S = X.sum(dim=1)  # (B, F) per-response feature sums: the ridge's statistics add up over chunks
        model = fitting.fitted(
            batch,
            ("token_rm", k, config.ridge),
            lambda: features.RidgeStats.of(S, z, fold, k, tuple(names)),
            lambda stats: stats.solve(config.ridge),
        )
        if model is None:  # the first pass of a streamed run: statistics only
            phi = torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
        else:
            W, b = model
            contributions = X * W[fold][:, None, :]  # (B, T, F) each feature's part of phi_t
            phi = contributions.sum(-1) + b[fold][:, None] / L  # (B, T) the intercept per token
            phi = torch.where(mask, phi, 0.0)
    extra = {"phi": phi, "features": names, "fallback": note, "fit_sample": model_note}
    if contributions is not None:
        extra["feature_contributions"] = torch.where(mask[..., None], contributions, 0.0)
    r = phi + (z[:, None] - phi.sum(dim=1, keepdim=True)) / L  # (B, T) sums to Z
    return finish_rewards(batch, config, z, r, extra)


MLP_FIT_TOKENS = 8192
MLP_LEARNING_RATE = 0.01


def mlp_fit_rows(mask: torch.Tensor, max_tokens: int | None = None) -> torch.Tensor:
    """Rows (whole responses) the MLP head trains on: all of them, or evenly strided ones holding about
    `max_tokens` tokens (training cost is per token and step; prediction still covers every row)."""
    return features.subsample_rows(
        mask.shape[0], mlp_keep(mask.shape[0], int(mask.sum()), max_tokens), mask.device
    )


def mlp_init(k: int, F: int, H: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Initial weights of the k fold models, float64: W1 (k, F, H) ~ N(0, 1/F), w2 (k, H) ~ N(0, 1/H)
    scaled by 0.1, biases 0; drawn on the CPU from one seeded generator (the same on any device)."""
    gen = torch.Generator().manual_seed(seed)
    W1 = torch.randn((k, F, H), generator=gen, dtype=torch.float64) / F**0.5
    w2 = torch.randn((k, H), generator=gen, dtype=torch.float64) * 0.1 / H**0.5
    return {
        "W1": W1,
        "b1": torch.zeros((k, H), dtype=torch.float64),
        "w2": w2,
        "b2": torch.zeros(k, dtype=torch.float64),
    }


@dataclass(frozen=True)
class MLPSample:
    """What the MLP head trains on: the moments of every real token's features (to standardize them) and
    the features of the `mlp_fit_rows` sample of whole responses, with their run-wide row numbers."""

    names: tuple[str, ...]
    count: torch.Tensor  # () tokens
    shift: torch.Tensor  # (F,) float64
    total: torch.Tensor  # (F,) sum (x - shift)
    squares: torch.Tensor  # (F,) sum (x - shift)^2
    rows: torch.Tensor  # (n,) int64 run-wide row numbers of the sampled responses
    lengths: torch.Tensor  # (n,) their lengths
    X: torch.Tensor  # (N, F) float64 their real tokens' features, row-major
    z: torch.Tensor  # (n,)
    fold: torch.Tensor  # (n,)

    @classmethod
    def of(
        cls, batch: RolloutBatch, X: torch.Tensor, z: torch.Tensor, fold: torch.Tensor, names: tuple[str, ...]
    ) -> MLPSample:
        mask = batch.response_mask
        real = X[mask].to(torch.float64)  # (N, F)
        shift = (
            real.mean(0) if real.shape[0] else torch.zeros(X.shape[-1], dtype=torch.float64, device=X.device)
        )
        run_fit = batch.run_fit
        if run_fit is None:
            numbers, picked = torch.arange(batch.B, device=batch.device), mlp_fit_rows(mask)
        else:
            numbers = run_fit.rows(batch)
            keep = mlp_keep(run_fit.n_rows, run_fit.n_tokens)
            picked = torch.isin(numbers, features.subsample_rows(run_fit.n_rows, keep, batch.device))
            picked = picked.nonzero(as_tuple=True)[0]
        sub = mask[picked]
        return cls(
            names,
            torch.tensor(float(real.shape[0]), dtype=torch.float64),
            shift,
            (real - shift).sum(0),
            ((real - shift) ** 2).sum(0),
            numbers[picked],
            sub.sum(1),
            X[picked][sub].to(torch.float64),
            z[picked].to(torch.float64),
            fold[picked],
        )

    def merge(self, other: MLPSample) -> MLPSample:
        fitting.same_columns(self.names, other.names)
        delta = other.shift - self.shift  # other's tokens about this shift
        total = other.total + other.count * delta
        squares = other.squares + 2 * delta * other.total + other.count * delta**2
        return MLPSample(
            self.names,
            self.count + other.count,
            self.shift,
            self.total + total,
            self.squares + squares,
            torch.cat([self.rows, other.rows]),
            torch.cat([self.lengths, other.lengths]),
            torch.cat([self.X, other.X]),
            torch.cat([self.z, other.z]),
            torch.cat([self.fold, other.fold]),
        )


def mlp_keep(rows: int, tokens: int, max_tokens: int | None = None) -> int:
    """How many evenly strided whole responses the MLP head trains on (all when tokens <= max_tokens,
    default `MLP_FIT_TOKENS`)."""
    max_tokens = MLP_FIT_TOKENS if max_tokens is None else max_tokens
    return rows if tokens <= max_tokens else max(1, rows * max_tokens // max(tokens, 1))


def mlp_fit(sample: MLPSample, k: int, ridge: float, hidden: int, steps: int) -> dict[str, torch.Tensor]:
    """The k cross-fitted MLPs `phi = w2 . tanh(W1^T x + b1) + b2` on standardized features (mean and
    population std over every real token; no labels involved), plus `mu` and `sd`. Model j trains on the
    sampled responses outside fold j to minimise `mean_i (sum_t phi_it - z_i)^2 + ridge / n_j (|W1|^2 +
    |w2|^2)` by `steps` full-batch Adam steps (lr 0.01), all k models at once in float64."""
    count = sample.count.clamp(min=1)
    mu = sample.shift + sample.total / count
    sd = (sample.squares / count - (sample.total / count) ** 2).clamp(min=0.0).sqrt()
    sd = torch.where(sd > 1e-12, sd, torch.ones_like(sd))
    order = torch.argsort(sample.rows)  # the in-memory row order, whatever order the chunks came in
    lengths = sample.lengths[order]
    starts = torch.cumsum(sample.lengths, 0) - sample.lengths
    tokens = torch.cat(
        [
            torch.arange(int(starts[i]), int(starts[i] + sample.lengths[i]), device=sample.X.device)
            for i in order.tolist()
        ]
        or [torch.zeros(0, dtype=torch.long, device=sample.X.device)]
    )
    Xf = (sample.X[tokens] - mu) / sd  # (N, F)
    n = len(order)
    tok_row = torch.repeat_interleave(torch.arange(n, device=Xf.device), lengths)  # (N,)
    zf, ff = sample.z[order], sample.fold[order]
    device = Xf.device
    params = {name: p.to(device).requires_grad_() for name, p in mlp_init(k, Xf.shape[-1], hidden).items()}
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
    return {**{name: p.detach() for name, p in params.items()}, "mu": mu, "sd": sd}


def mlp_apply(
    model: dict[str, torch.Tensor], X: torch.Tensor, mask: torch.Tensor, fold: torch.Tensor
) -> torch.Tensor:
    """phi: (B, T) float32, response i scored by model fold(i), 0 on padding. X: (B, T, F) features."""
    Xs = torch.where(mask[..., None], (X.to(torch.float64) - model["mu"]) / model["sd"], 0.0)  # (B, T, F)
    with torch.no_grad():
        W1, b1, w2, b2 = (model[n][fold] for n in ("W1", "b1", "w2", "b2"))  # per response
        h = torch.tanh(torch.einsum("btf,bfh->bth", Xs, W1) + b1[:, None, :])  # (B, T, H)
        phi = torch.einsum("bth,bh->bt", h, w2) + b2[:, None]  # (B, T)
    return torch.where(mask, phi, 0.0).to(torch.float32)


@dataclass(frozen=True)
class RudderConfig(CreditConfig):
    """RUDDER-style return decomposition with a linear prefix-return predictor g."""

    ridge: float = param(1.0, low=0.0, high=1e6, help="Ridge penalty")
    folds: int = param(5, low=2, high=20, help="Cross-fitting folds (by group)")

    def scope(self) -> str:
        return fitting.fit_scope()  # the model is cross-fitted over the groups of the whole run


@register(
    "rudder",
    RudderConfig,
    "Return decomposition: r_t = g(y<=t) - g(y<t), residual on the last token",
    family="learned",
    explain=explain_rewards,
)
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
    note = sample = None
    if k < 2:
        note = "rudder needs at least two groups to cross-fit; used g = 0 (all of Z on the last token)"
    else:
        rows = mask.nonzero(as_tuple=True)
        P = prefix[rows]
        f_tok = fold[rows[0]]
        fit = fitting.token_sample(batch, MAX_FIT_TOKENS)
        model = fitting.fitted(
            batch,
            ("rudder", k, config.ridge),
            lambda: features.RidgeStats.of(P[fit], z[rows[0]][fit], f_tok[fit], k, (*names, "position")),
            lambda stats: stats.solve(config.ridge),
        )
        if model is not None:  # None: the first pass of a streamed run
            W, b = model
            g[rows] = (P * W[f_tok]).sum(-1) + b[f_tok]
        sample = fitting.sample_note(batch, "rudder's prefix-return predictor g", MAX_FIT_TOKENS)
    prev = masked.forward_fill_index(mask)  # (B, T) this token's index; shift to the previous real token
    prev = torch.cat([torch.full_like(prev[:, :1], -1), prev[:, :-1]], dim=1)
    g_prev = torch.where(prev >= 0, g.gather(1, prev.clamp(min=0)), 0.0)
    r = torch.where(mask, g - g_prev, 0.0)
    last = masked.last_index(mask)
    has = last >= 0
    g_last = g.gather(1, last.clamp(min=0)[:, None])[:, 0]
    residual = torch.where(has, z - g_last, 0.0)
    r = r.scatter_add(1, last.clamp(min=0)[:, None], residual[:, None])
    return finish_rewards(
        batch,
        config,
        z,
        r,
        {"g": torch.where(mask, g, 0.0), "features": names, "fallback": note, "fit_sample": sample},
    )


KTAE_SOURCE = (
    "Sun et al., 'KTAE: A Model-Free Algorithm to Key-Tokens Advantage Estimation in Mathematical "
    "Reasoning' (arXiv 2505.16826); official code xiaolizh1/KTAE @ "
    "ea9fb77f366216d754e2368653911724e73a7376 (verl/workers/actor/compute_key_tokens.py, "
    "verl/trainer/ppo/core_algos.py compute_ktae_outcome_advantage_and_keytokens)"
)
BM25_K1, BM25_B = 2.0, 0.5  # the official compute_tf constants


@dataclass(frozen=True)
class KTAEConfig(CreditConfig):
    """KTAE: A = Z + K(token id), K from the group's correct (R > 0) vs incorrect table of each token id."""

    scale: float = param(1.0, low=0.0, high=10.0, help="'top' of the official code: K in (-top, top)")
    alpha: float = param(1.0, low=0.0, high=10.0, help="Weight of the Fisher strength exp(-2p)")
    beta_ig: float = param(1.0, low=0.0, high=10.0, help="Weight of the information gain (bits)")
    use_tf: bool = param(True, help="Add the term-frequency term tf_c/tf_w - tf_w/tf_c to Cohen's h")
    eos_token_id: int = param(
        151643,
        low=-1,
        high=10_000_000,
        help="Token id scored 0 (official: 151643, Qwen2.5's <|endoftext|>); -1: none",
    )


def _log_comb(n: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    return torch.lgamma(n + 1) - torch.lgamma(k + 1) - torch.lgamma(n - k + 1)


# Ties between hypergeometric probabilities are decided with scipy.stats.fisher_exact's relative tolerance
# (a table counts as "no more likely" when p_k <= p_obs * (1 + 1e-7)), in float64. Distinct probabilities of
# tables with the same margins differ by far more than 1e-7 relatively at the group sizes KTAE sees, so the
# decision is the exact one on every CPU. The official code compares float32 values with no tolerance, and
# whether two equal probabilities compare equal there depends on the CPU's rounding.
FISHER_TIE_TOLERANCE = 1e-7


def fisher_p_values(
    t_a: torch.Tensor, t_b: torch.Tensor, t_c: torch.Tensor, t_d: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Two-sided Fisher exact p of each table [[a, b], [c, d]] (a: correct rollouts containing the id, b:
    incorrect containing, c, d: not containing): the sum of the hypergeometric probabilities of the tables
    with the same margins that do not exceed the observed one (ties within `FISHER_TIE_TOLERANCE`).
    Returns p: (U,) float32 and p_is_one: (U,) bool, true when every such table is counted, i.e. p = 1
    exactly (decided by counting tables, never by comparing a float sum with 1)."""
    a, b, c, d = (x.to(torch.float64) for x in (t_a, t_b, t_c, t_d))
    R1, C1 = a + b, a + c
    n = R1 + c + d
    k_min = torch.clamp(R1 + C1 - n, min=0.0)
    k_max = torch.minimum(R1, C1)
    ks = torch.arange(int(k_max.max()) + 1 if k_max.numel() else 1, dtype=torch.float64, device=t_a.device)
    k = ks[None, :].expand(a.shape[0], -1)  # (U, K)
    inside = (k >= k_min[:, None]) & (k <= k_max[:, None])
    C1g, R1g, ng = C1[:, None].expand_as(k), R1[:, None].expand_as(k), n[:, None].expand_as(k)
    p_k = torch.exp(_log_comb(C1g, k) + _log_comb(ng - C1g, R1g - k) - _log_comb(ng, R1g)) * inside  # (U, K)
    p_obs = torch.exp(_log_comb(C1, a) + _log_comb(n - C1, R1 - a) - _log_comb(n, R1))  # (U,)
    counted = (p_k <= p_obs[:, None] * (1.0 + FISHER_TIE_TOLERANCE)) & inside
    p_is_one = (counted == inside).all(dim=1)
    p = torch.where(p_is_one, 1.0, torch.sum(torch.where(counted, p_k, 0.0), dim=1).clamp(max=1.0))
    return p.to(torch.float32), p_is_one


def _entropy_term(p: torch.Tensor) -> torch.Tensor:
    return -p * torch.where(p > 0, torch.log2(p), 0.0)


def information_gain(t_a, t_b, t_c, t_d) -> torch.Tensor:
    """IG (bits) of 'contains the id' about correctness, as the official calculate_ig: (U,) float32."""
    t_n = t_a + t_b + t_c + t_d
    h_y = _entropy_term((t_a + t_c) / t_n) + _entropy_term((t_b + t_d) / t_n)

    def cond(x1, x2):
        total = x1 + x2
        return torch.where(total > 0, _entropy_term(x1 / total) + _entropy_term(x2 / total), 0.0)

    ig = h_y - (((t_a + t_b) / t_n) * cond(t_a, t_b) + ((t_c + t_d) / t_n) * cond(t_c, t_d))
    return torch.where(t_n == 0, 0.0, ig)


def key_scores(
    token_ids: torch.Tensor,
    mask: torch.Tensor,
    group_ids: torch.Tensor,
    rewards: torch.Tensor,
    config: KTAEConfig,
) -> dict[str, torch.Tensor]:
    """The official KTAE key-token score of every real token, per group, vectorized over (group, id) pairs.

    Per group: correct = R > 0; a/b = correct/incorrect rollouts containing the id, c/d = not containing.
    F = exp(-2p) (0 when p = 1 exactly: every table counted), p the two-sided Fisher exact test; IG in bits;
    Cohen's h = asin sqrt(a/(a+c)) - asin sqrt(b/(b+d)), plus (use_tf) tf_c/(tf_w + 1e-5) - tf_w/(tf_c + 1e-5)
    with BM25 term frequencies (k1 = 2, b = 0.5) of the id among the correct and incorrect rollouts' tokens;
    K = (sigmoid((alpha F + beta IG) x / (alpha + beta)) - 1/2) * 2 * scale, the EOS id scored 0. Groups that
    are all correct or all incorrect give K = 0; a set whose rollouts are all empty has term frequency 0.
    Returns (B, T) float32 tensors, 0 on padding:
    key_score, fisher_strength, information_gain, cohen_h, tf_term."""
    B, T = mask.shape
    device = mask.device
    gidx, n_groups = masked.group_index(group_ids)
    rows, cols = mask.nonzero(as_tuple=True)
    tok = token_ids[rows, cols].long()
    vocab = int(tok.max()) + 1 if tok.numel() else 1
    correct = rewards > 0.0
    corr_f = correct.to(torch.float32)
    n1 = masked.group_sum(corr_f, gidx, n_groups)  # (G,) correct rollouts per group
    n0 = masked.group_sum(1.0 - corr_f, gidx, n_groups)
    lengths = mask.sum(1).to(torch.float32)
    total_c = masked.group_sum(lengths * corr_f, gidx, n_groups)  # (G,) tokens of the correct rollouts
    total_w = masked.group_sum(lengths * (1.0 - corr_f), gidx, n_groups)
    # (group, id) keys of every real token; presence counts once per rollout, tf counts every occurrence
    tok_key = gidx[rows] * vocab + tok
    keys, inverse = torch.unique(tok_key, return_inverse=True)  # (U,)
    pairs, pair_inverse = torch.unique(rows * vocab + tok, return_inverse=True)
    p_row = pairs // vocab
    pair_key = torch.searchsorted(keys, gidx[p_row] * vocab + pairs % vocab)
    U = keys.numel()
    zeros = torch.zeros(U, dtype=torch.float32, device=device)
    t_a = zeros.clone().index_add_(0, pair_key, corr_f[p_row])
    t_b = zeros.clone().index_add_(0, pair_key, 1.0 - corr_f[p_row])
    cnt_c = zeros.clone().index_add_(0, inverse, corr_f[rows])
    cnt_w = zeros.clone().index_add_(0, inverse, 1.0 - corr_f[rows])
    g_of = keys // vocab
    t_c, t_d = n1[g_of] - t_a, n0[g_of] - t_b
    fisher = torch.zeros_like(t_a)
    if config.alpha:
        p, p_is_one = fisher_p_values(t_a, t_b, t_c, t_d)
        fisher = torch.where(p_is_one, 0.0, torch.exp(-2 * p))
    ig = information_gain(t_a, t_b, t_c, t_d) if config.beta_ig else torch.zeros_like(t_a)
    h = torch.asin(torch.sqrt(torch.clamp(t_a / (t_a + t_c + 1e-10), 0, 1))) - torch.asin(
        torch.sqrt(torch.clamp(t_b / (t_b + t_d + 1e-10), 0, 1))
    )
    tf_term = _tf_term(cnt_c, cnt_w, total_c[g_of], total_w[g_of]) if config.use_tf else torch.zeros_like(t_a)
    x = h + tf_term
    key = ((config.alpha * fisher + config.beta_ig * ig) * x) / (config.alpha + config.beta_ig)
    key = (torch.sigmoid(key) - 0.5) * 2 * config.scale
    mixed = (n1[g_of] > 0) & (n0[g_of] > 0)
    key = torch.where(mixed & ((keys % vocab) != config.eos_token_id), key, 0.0)
    out = {}
    for name, per_key in (
        ("key_score", key),
        ("fisher_strength", fisher),
        ("information_gain", ig),
        ("cohen_h", h),
        ("tf_term", tf_term),
    ):
        full = torch.zeros((B, T), dtype=torch.float32, device=device)
        full[rows, cols] = torch.where(mixed, per_key, 0.0)[inverse]
        out[name] = full
    return out


def _tf_term(cnt_c: torch.Tensor, cnt_w: torch.Tensor, tc: torch.Tensor, tw: torch.Tensor) -> torch.Tensor:
    """tf_c/(tf_w + 1e-5) - tf_w/(tf_c + 1e-5), BM25 term frequencies (official compute_tf): cnt_c, cnt_w
    (U,) the id's count among the correct / incorrect rollouts' tokens; tc, tw (U,) their totals. (U,)"""
    avg = (tc + tw) / 2
    kc = BM25_K1 * (1 - BM25_B + BM25_B * (tc / avg))
    kw = BM25_K1 * (1 - BM25_B + BM25_B * (tw / avg))
    # a set whose rollouts are all empty has no tokens: tf 0 there (the official code divides by 0)
    fc = torch.where(tc > 0, cnt_c / tc.clamp(min=1), 0.0)
    fw = torch.where(tw > 0, cnt_w / tw.clamp(min=1), 0.0)
    tf_c = fc * (BM25_K1 + 1) / (fc + kc)
    tf_w = fw * (BM25_K1 + 1) / (fw + kw)
    return tf_c / (tf_w + 1e-5) - tf_w / (tf_c + 1e-5)


@register(
    "ktae",
    KTAEConfig,
    "KTAE (Sun et al., arXiv 2505.16826, official xiaolizh1/KTAE): A = Z + K(token id), K in (-1, 1) "
    "from "
    "the group's correct (R > 0) vs incorrect rollouts: Fisher strength exp(-2p), information gain in "
    "bits, Cohen's h plus a term-frequency term, tanh squash, EOS 0",
    family="learned",
    source=KTAE_SOURCE,
    explain=explain_rewards,
)
def ktae(batch: RolloutBatch, config: KTAEConfig) -> EstimatorResult:
    """A: (B, T) = Z + K on real tokens (Z: the config's outcome; the official code uses grpo). Diagnostics:
    Z, R, correct (B,) bool, key_score, fisher_strength, information_gain, cohen_h, tf_term (B, T)."""
    mask = batch.response_mask
    z = outcome_z(batch, config)
    R = scores_of(batch, config.channel)
    parts = key_scores(batch.token_ids, mask, batch.group_ids, R, config)
    K = parts["key_score"]
    adv = torch.where(mask, z[:, None] + K, 0.0)
    r = adv / mask.sum(dim=1, keepdim=True).clamp(min=1)
    diagnostics = {"R": R, "correct": R > 0.0, **parts}
    if config.then_gae:
        return finish_rewards(batch, config, z, r, diagnostics)
    return EstimatorResult(adv, {"Z": z, "r": r, **diagnostics})
