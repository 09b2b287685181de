"""Every channel's term of A_final at one token, derived with the numbers: the Rollout view's
"why this credit" rows and `creditlens explain --json`'s `channels[c].derivation.lines`.

A_final = Σ_c β_c·Ã_c, each channel projected the way the run's channels say (backend/credit/channels.py):
an outcome channel by the estimator (its own derivation, `backend.views.explain.derivation`), a span by its
token rewards, KL per token, length on the overlong tail, process at step ends, a broadcast score on every
token; then normalized in its channel (group, batch or none) and weighted by β_c. `channel_lines` gives
the lines of one channel at token t, `recipe` the same without a token (what the channel does), and
`final_line` the sum.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from backend.core.batch import RolloutBatch
from backend.credit.channels import ChannelSpec

_EPS = 1e-6  # backend.credit.channels' normalization ε

EstimatorLines = Callable[[int], list[str]]


def _n(x: float) -> str:
    return f"{float(x):.4g}"


def recipe(spec: ChannelSpec) -> str:
    """What the channel does to every token, in one line (no numbers of a token)."""
    how = {
        "estimator": f"{spec.estimator} on the channel's score (its own derivation)",
        "span": f"token_rewards[{spec.name}] where the evidence is (0 elsewhere)",
        "kl": "k_t = −(logprob_t − ref_logprob_t) per token",
        "length": "the score spread over the tail past the group's median length",
        "process": "the score split over the step ends",
        "broadcast": "the sequence score on every token",
    }[spec.projection]
    return f"{spec.name}: {how}; normalization {spec.normalization}; β {spec.beta:g}"


def channel_lines(
    spec: ChannelSpec,
    batch: RolloutBatch,
    row: int,
    t: int,
    projected: np.ndarray,
    contribution: float,
    estimator_lines: EstimatorLines | None = None,
) -> list[str]:
    """The derivation of channel `spec`'s term β_c·Ã_c at token `t` of response `row` of `batch` (the group
    the credit was computed on): the projection x_t, its normalization Ã_t, then β_c·Ã_c = `contribution`.

    projected: (B, T) the channel's projection before normalization; estimator_lines: the estimator's own
    derivation at a token (an outcome channel)."""
    x = float(projected[row, t])
    lines = _projection(spec, batch, row, t, x, projected, estimator_lines)
    tilde = x
    if spec.normalization != "none":
        mask = batch.trained().response_mask.cpu().numpy().astype(bool)
        if spec.normalization == "group":
            same = (batch.group_ids == batch.group_ids[row]).cpu().numpy()
            mask = mask & same[:, None]
        values = projected[mask].astype(np.float64)
        mean = float(values.mean()) if values.size else 0.0
        std = float(values.std(ddof=1)) if values.size > 1 else 0.0
        where = "the group's" if spec.normalization == "group" else "the batch's"
        if std > 0:
            tilde = (x - mean) / (std + _EPS)
            lines.append(
                f"Ã_t = (x_t − mean) / (std + ε) = ({_n(x)} − {_n(mean)}) / ({_n(std)} + 1e-06) = "
                f"{_n(tilde)}   ({where} tokens, {values.size})"
            )
        else:
            tilde = 0.0
            lines.append(f"Ã_t = 0: every one of {where} tokens has the same x ({_n(mean)})")
    lines.append(f"β·Ã_t = {spec.beta:g} × {_n(tilde)} = {_n(contribution)}")
    return lines


def _projection(
    spec: ChannelSpec,
    batch: RolloutBatch,
    row: int,
    t: int,
    x: float,
    projected: np.ndarray,
    estimator_lines: EstimatorLines | None,
) -> list[str]:
    """The lines that give x_t, the channel's projection at t."""
    name = spec.name
    if spec.projection == "estimator":
        own = estimator_lines(t) if estimator_lines is not None else []
        return own or [f"x_t = A_t of {spec.estimator} on {name} = {_n(x)}"]
    if spec.projection == "kl":
        lp = float(batch.logprobs[row, t])
        ref = float(batch.ref_logprobs[row, t])
        return [f"x_t = −(logprob_t − ref_logprob_t) = −({_n(lp)} − {_n(ref)}) = {_n(x)}"]
    local = batch.token_rewards.get(name)
    if local is not None and spec.projection in ("span", "length", "process"):
        where = "on its span" if x else "no penalty or reward at this token"
        return [f"x_t = token_rewards[{name}][t] = {_n(x)}   ({where})"]
    score = float(batch.scores[name][row]) if name in batch.scores else float("nan")
    if spec.projection == "broadcast":
        return [f"x_t = s = {_n(score)}   (the sequence score on every token)"]
    n = int(np.count_nonzero(projected[row]))
    if spec.projection == "length":
        if x == 0:
            return [f"x_t = 0   (s = {_n(score)}; not in the tail past the group's median length)"]
        return [f"x_t = s / n = {_n(score)} / {n} = {_n(x)}   ({n} tokens past the group's median length)"]
    if x == 0:
        return [f"x_t = 0   (s = {_n(score)}; this token is not a step end)"]
    return [f"x_t = s / k = {_n(score)} / {n} = {_n(x)}   (split over the {n} step ends)"]


def final_line(contributions: dict[str, float], final: float) -> str:
    """A_final = Σ_c β_c·Ã_c with the channels' numbers."""
    parts = " + ".join(f"{_n(v)} ({c})" for c, v in contributions.items())
    return f"A_final = Σ_c β_c·Ã_c = {parts} = {_n(final)}"
