"""Where credit lands and whether estimators agree: credit mass by token class (of |A|, or signed: credit
and penalty apart), rank agreement between estimators, channel shares of |A| (whole and per token), and the
difference of two credit rows.
Shapes: `(B, T)` plus `response_mask` (docs/estimators.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from backend.core.arrays import to_numpy
from backend.core.ranks import spearman
from backend.credit import token_classes

# The default display classes for "credit mass by token class", `other` last (a run may define its own:
# backend.credit.token_classes).
CREDIT_CLASSES = token_classes.names()


def credit_mass_by_class(
    advantages: dict[str, torch.Tensor],
    classes: np.ndarray,
    response_mask: torch.Tensor,
    class_names: tuple[str, ...] = CREDIT_CLASSES,
) -> pd.DataFrame:
    """Share of Σ|A| that lands on each token class, per estimator.

    advantages: name -> (B, T); classes: (B, T) from `token_class_ids`.
    returns: rows (estimator, token_class, credit_share, token_share); credit_share sums to 1 per
    estimator (NaN when the estimator gives no credit at all), token_share is the class's share of
    real tokens, so credit_share > token_share means the class gets more than its count.
    """
    mask = to_numpy(response_mask).astype(bool)
    n_tokens = max(int(mask.sum()), 1)
    rows = []
    for name, adv in advantages.items():
        magnitude = np.abs(to_numpy(adv).astype(np.float64)) * mask
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


SIGNED_MASS_COLUMNS = [
    "estimator",
    "token_class",
    "credit_share",
    "penalty_share",
    "abs_share",
    "token_share",
    "credit_mass",
    "penalty_mass",
]


def signed_mass_by_class(
    advantages: dict[str, torch.Tensor | np.ndarray],
    classes: np.ndarray,
    mask: torch.Tensor | np.ndarray,
    class_names: tuple[str, ...] = CREDIT_CLASSES,
) -> pd.DataFrame:
    """Where the credit and where the penalty land, per token class and estimator, as shares of Σ|A|.

    advantages: name -> (B, T); classes: (B, T) from `token_classes.class_ids`; mask: (B, T) the tokens
    counted (the trained ones: an untrained token has A = 0 and is no class's share of tokens).
    returns: rows (estimator, token_class, credit_share, penalty_share, abs_share, token_share,
    credit_mass, penalty_mass): credit_mass = Σ max(A, 0) and penalty_mass = Σ max(−A, 0) over the class's
    tokens, each share that mass over the estimator's Σ|A| (NaN when it gives no credit at all), so
    credit_share + penalty_share = abs_share (`credit_mass_by_class`'s share) and the abs shares of all
    classes sum to 1. A class that is all penalty (a format penalty on filler) has credit_share 0 however
    large its abs_share is.
    """
    mask = to_numpy(mask).astype(bool)
    n_tokens = max(int(mask.sum()), 1)
    rows = []
    for name, adv in advantages.items():
        values = to_numpy(adv).astype(np.float64) * mask  # (B, T)
        positive, negative = np.clip(values, 0, None), np.clip(-values, 0, None)  # (B, T) each
        total = float(positive.sum() + negative.sum())
        for c, label in enumerate(class_names):
            in_class = (classes == c) & mask
            if not in_class.any():
                continue
            gain, loss = float(positive[in_class].sum()), float(negative[in_class].sum())
            rows.append(
                {
                    "estimator": name,
                    "token_class": label,
                    "credit_share": gain / total if total > 0 else math.nan,
                    "penalty_share": loss / total if total > 0 else math.nan,
                    "abs_share": (gain + loss) / total if total > 0 else math.nan,
                    "token_share": float(in_class.sum() / n_tokens),
                    "credit_mass": gain,
                    "penalty_mass": loss,
                }
            )
    return pd.DataFrame(rows, columns=SIGNED_MASS_COLUMNS)


def rank_agreement(
    advantages: dict[str, torch.Tensor | np.ndarray], response_mask: torch.Tensor
) -> pd.DataFrame:
    """Spearman correlation of A between every pair of estimators, pooled over real tokens.

    advantages: name -> (B, T) tensor or array.
    returns: a square DataFrame indexed and columned by estimator name (NaN where one is constant).
    """
    mask = response_mask.bool().cpu()
    flat = {name: torch.as_tensor(adv).detach().cpu()[mask] for name, adv in advantages.items()}
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
    totals = {name: float(np.abs(to_numpy(p).astype(np.float64)).sum()) for name, p in parts.items()}
    grand = sum(totals.values())
    return {name: (v / grand if grand > 0 else math.nan) for name, v in totals.items()}


def token_shares(parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per token, each part's share of Σ_c |part_c| at that token: name -> (L,) in [0, 1] (0 where all 0)."""
    stack = np.abs(np.stack([np.asarray(p, dtype=np.float64) for p in parts.values()]))  # (C, L)
    total = stack.sum(axis=0)  # (L,)
    share = np.divide(stack, total, out=np.zeros_like(stack), where=total > 0)
    return {name: share[c] for c, name in enumerate(parts)}


def credit_difference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """B − A per token (the Compare view's difference row)."""
    return np.asarray(b, dtype=np.float64) - np.asarray(a, dtype=np.float64)
