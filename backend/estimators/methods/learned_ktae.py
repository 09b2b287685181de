"""KTAE, the learned family's key-token advantage (docs/estimators.md section 6): A = Z + K(token id), K from
each token id's table of correct vs incorrect responses in the group (Fisher's exact test, information gain,
Cohen's h with a BM25 term frequency), as in the official code named in KTAE_SOURCE.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from backend.core.batch import RolloutBatch
from backend.estimators import masked
from backend.estimators.common import CreditConfig, explain_rewards, finish_rewards, outcome_z
from backend.estimators.registry import EstimatorResult, param, register
from backend.estimators.token_helpers import scores_of

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
