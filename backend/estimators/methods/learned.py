"""Learned token credit (docs/estimators.md section 6): token_rm, rudder (ktae: `learned_ktae.py`).

The regressions are small ridge fits on cheap token features (`features.py`), cross-fitted by group
so the credit of a response never comes from a model that saw it. All three are credit operators:
they produce token rewards r with sum_t r_t = Z exactly (KTAE: a per-token bonus on top of Z).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import features, fitting, masked
from backend.estimators.common import CreditConfig, explain_rewards, finish_rewards, outcome_z
from backend.estimators.registry import EstimatorResult, param, register

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
