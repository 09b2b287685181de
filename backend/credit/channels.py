"""Channels: split first, combine later (docs/estimators.md section 8).

Each reward channel is projected onto tokens in its own way (`project_channel`), normalized in its own
channel (`normalize`), and weighted: `A_final = sum_c beta_c * A~_c` (`combine`, which also returns the
per-token contribution of every channel; they sum exactly to `final`). `mixed_baseline` is the
comparison everyone asks for: sum the sequence scores first, then run one estimator. `dual_ascent`
replays constraint mode over logged per-step violation rates.

Shapes: every per-token tensor is `(B, T)` float32 and exactly 0 on padding.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import torch

from backend.core.batch import ALL_CHANNELS, BatchError, RolloutBatch
from backend.estimators import masked, registry
from backend.estimators.token_helpers import step_ends

Projection = Literal["estimator", "span", "kl", "length", "process", "broadcast"]
Normalization = Literal["group", "batch", "none"]

_SPAN_CHANNELS = ("format", "style", "safety", "repetition")
_EPS = 1e-6


@dataclass(frozen=True)
class ChannelSpec:
    """How one channel becomes token credit.

    name: the channel (a key of `batch.scores` / `batch.token_rewards`; "kl" for the KL channel)
    projection: estimator (any registered estimator, e.g. the task), span (the token-local rewards
        `token_rewards[name]`, where the evidence occurs), kl (`-(logprob - ref_logprob)` per token),
        length (pressure on the overlong tail), process (step rewards at step ends), broadcast
        (the sequence score on every token; what a mixed pipeline effectively does)
    estimator, estimator_config: for projection "estimator" (overrides as (key, value) pairs)
    normalization: group (z-score over the group's real tokens), batch (whitening over the batch's
        real tokens), none
    beta: the channel's weight in A_final
    """

    name: str
    projection: Projection
    estimator: str = "grpo"
    estimator_config: tuple[tuple[str, Any], ...] = ()
    normalization: Normalization = "group"
    beta: float = 1.0

    def __post_init__(self) -> None:
        if self.projection not in ("estimator", "span", "kl", "length", "process", "broadcast"):
            raise ValueError(f"channel {self.name!r}: unknown projection {self.projection!r}")
        if self.normalization not in ("group", "batch", "none"):
            raise ValueError(f"channel {self.name!r}: unknown normalization {self.normalization!r}")


def default_specs(batch: RolloutBatch) -> dict[str, ChannelSpec]:
    """Sensible defaults for the channels this batch has.

    - task: the GRPO estimator, no extra normalization (Z is already group-relative).
    - format / style / safety / repetition: `span` over `token_rewards[c]` when the run has them
      (the penalty sits on the violating tokens; no normalization, so a clean response gets exactly
      0), else `broadcast` of the sequence score with group normalization (the best we can do
      without local evidence; the app flags it).
    - process: step rewards at step ends, group-normalized.
    - length: tail pressure, no normalization.
    - kl (when logprobs and ref_logprobs exist): per-token `-(logprob - ref_logprob)`, beta 0.05.
    - any other scored channel: the GRPO estimator on that channel.
    """
    specs: dict[str, ChannelSpec] = {}
    channels = list(dict.fromkeys([*batch.scores, *batch.token_rewards]))
    for name in channels:
        if name == "task":
            specs[name] = ChannelSpec(name, "estimator", "grpo", normalization="none")
        elif name == "process":
            specs[name] = ChannelSpec(name, "process", normalization="group")
        elif name == "length":
            specs[name] = ChannelSpec(name, "length", normalization="none")
        elif name in batch.token_rewards:
            specs[name] = ChannelSpec(name, "span", normalization="none")
        elif name in _SPAN_CHANNELS:
            specs[name] = ChannelSpec(name, "broadcast", normalization="group")
        else:
            specs[name] = ChannelSpec(name, "estimator", "grpo", (("channel", name),), normalization="none")
    if batch.logprobs is not None and batch.ref_logprobs is not None:
        specs["kl"] = ChannelSpec("kl", "kl", normalization="none", beta=0.05)
    return specs


def estimator_config(spec: ChannelSpec):
    """The built config of an estimator channel: its overrides, with `channel = spec.name` unless set."""
    cfg_cls = registry.get(spec.estimator).config_cls
    overrides = dict(spec.estimator_config)
    if "channel" in {f.name for f in dataclasses.fields(cfg_cls)} and "channel" not in overrides:
        overrides["channel"] = spec.name
    return registry.make_config(spec.estimator, **overrides)


def project_channel(batch: RolloutBatch, spec: ChannelSpec) -> torch.Tensor:
    """Un-normalized token credit of one channel: (B, T) float32, 0 on padding.

    - estimator: `registry.estimate(spec.estimator, batch, config)` with `channel = spec.name` unless
      the spec's config sets it.
    - span: `token_rewards[name]` as the local rewards, unchanged: the channel's penalty goes where
      the evidence occurs, never broadcast. A channel with only a sequence score cannot be a span
      (a clear error says to use broadcast or import token rewards).
    - kl: `k_t = -(logprob_t - ref_logprob_t)`.
    - length: `token_rewards[name]` when present; else the sequence score `s_i` spread evenly over
      the response's tail beyond the group's median length (so it sums to `s_i`), or on the last
      token when the response is not longer than that median.
    - process: `token_rewards[name]` when present (step rewards already at step ends); else the
      sequence score split equally over the step-end tokens (newline-ended steps).
    - broadcast: the sequence score on every real token.

    Tokens the trainer does not train (`loss_mask` 0) count as padding in every projection.
    """
    batch = batch.trained()
    mask = batch.response_mask
    zero = torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
    if spec.projection == "estimator":
        config = estimator_config(spec)
        if getattr(config, "channel", None) == ALL_CHANNELS and ALL_CHANNELS not in batch.scores:
            batch = batch.with_channel_sum(ALL_CHANNELS)  # the channel scores summed per rollout first
        return registry.estimate(spec.estimator, batch, config).advantages.to(torch.float32)
    if spec.projection == "kl":
        if batch.logprobs is None or batch.ref_logprobs is None:
            raise BatchError(f"channel {spec.name!r}: the kl projection needs logprobs and ref_logprobs")
        return torch.where(mask, -(batch.logprobs - batch.ref_logprobs).to(torch.float32), zero)
    local = batch.token_rewards.get(spec.name)
    if spec.projection == "span":
        if local is None:
            raise BatchError(
                f"channel {spec.name!r} has no token_rewards, so it cannot be a span; import "
                "token_rewards for it or use the broadcast projection"
            )
        return torch.where(mask, local.to(torch.float32), zero)
    if spec.projection in ("length", "process") and local is not None:
        return torch.where(mask, local.to(torch.float32), zero)
    if spec.name not in batch.scores:
        raise BatchError(f"channel {spec.name!r} has neither scores nor token_rewards in this run")
    # A rollout without a score on this channel gets no credit from it (advantage 0, as in TRL).
    score = torch.nan_to_num(batch.scores[spec.name].to(torch.float32).to(batch.device), nan=0.0)  # (B,)
    if spec.projection == "broadcast":
        return masked.broadcast(score, mask)
    if spec.projection == "length":
        L = mask.sum(dim=1).to(torch.float32)  # (B,)
        index, n_groups = masked.group_index(batch.group_ids)
        median = _group_median(L, index, n_groups)  # (B,)
        k = (masked.positions(mask) + 1).to(torch.float32)
        tail = mask & (k > median[:, None])
        last = mask & (k == L[:, None])
        where = torch.where(tail.any(1)[:, None], tail, last)
        return torch.where(where, score[:, None] / where.sum(1, keepdim=True).clamp(min=1), zero)
    # process
    ends, _ = step_ends(batch, r"\n")
    return torch.where(ends, score[:, None] / ends.sum(1, keepdim=True).clamp(min=1), zero)


def _group_median(x: torch.Tensor, index: torch.Tensor, n_groups: int) -> torch.Tensor:
    """(B,) lower median of `x` within each response's group."""
    table, _ = masked.group_slots(index, n_groups)  # (nG, G)
    vals = torch.where(table >= 0, x[table.clamp(min=0)], torch.full_like(x[table.clamp(min=0)], torch.inf))
    count = (table >= 0).sum(1)
    med = vals.sort(dim=1).values.gather(1, ((count - 1) // 2)[:, None])[:, 0]  # (nG,)
    return med[index]


def normalize(adv: torch.Tensor, batch: RolloutBatch, mode: Normalization) -> torch.Tensor:
    """Per-channel normalization over real tokens: (B, T) -> (B, T), 0 on padding.

    group: `(A - mean_g) / (std_g + eps)` with mean/unbiased std over all real tokens of the group
    (a group whose tokens are all equal gives 0); batch: the same over the whole batch (verl's
    whitening); none: unchanged. Untrained tokens (`loss_mask` 0) are left out of the statistics and get 0.
    """
    batch = batch.trained()
    mask = batch.response_mask
    adv = torch.where(mask, adv.to(torch.float32), 0.0)
    if mode == "none":
        return adv
    if mode == "batch":
        mean = masked.masked_mean(adv, mask)
        std = torch.sqrt(masked.masked_var(adv, mask))
        flat = std <= 0
        out = torch.where(flat, torch.zeros_like(adv), (adv - mean) / (std + _EPS))
        return torch.where(mask, out, 0.0)
    if mode == "group":
        index, n_groups = masked.group_index(batch.group_ids)
        mean, std = masked.group_token_mean_std(adv, mask, index, n_groups)  # (B, 1)
        out = torch.where(std > 0, (adv - mean) / (std + _EPS), torch.zeros_like(adv))
        return torch.where(mask, out, 0.0)
    raise ValueError(f"unknown normalization {mode!r}; use group, batch or none")


@dataclass
class CombinedResult:
    """final: (B, T) A_final; per_channel: name -> (B, T) normalized A~_c; contributions: name -> (B, T)
    beta_c A~_c, which sum exactly (same order, same float ops) to `final`."""

    final: torch.Tensor
    per_channel: dict[str, torch.Tensor] = field(default_factory=dict)
    contributions: dict[str, torch.Tensor] = field(default_factory=dict)
    projected: dict[str, torch.Tensor] = field(default_factory=dict)
    """name -> (B, T) the channel's projection before normalization (for an estimator channel: the
    estimator's advantages on that channel)."""


def combine(
    batch: RolloutBatch, specs: dict[str, ChannelSpec], projected: dict[str, torch.Tensor] | None = None
) -> CombinedResult:
    """`A_final = sum_c beta_c * normalize(project_channel(c))`, summed in the order of `specs`.

    projected: channel -> (B, T) projections computed elsewhere, used instead of `project_channel`
    (an estimator channel computed at the estimator's scope, wider than this batch)."""
    batch.validate()
    mask = batch.response_mask
    final = torch.zeros(mask.shape, dtype=torch.float32, device=batch.device)
    per_channel: dict[str, torch.Tensor] = {}
    contributions: dict[str, torch.Tensor] = {}
    raw: dict[str, torch.Tensor] = {}
    for name, spec in specs.items():
        given = (projected or {}).get(name)
        raw[name] = (
            project_channel(batch, spec)
            if given is None
            else given.to(device=batch.device, dtype=torch.float32)
        )
        tilde = normalize(raw[name], batch, spec.normalization)
        per_channel[name] = tilde
        contributions[name] = spec.beta * tilde
        final = final + contributions[name]
    return CombinedResult(final=final, per_channel=per_channel, contributions=contributions, projected=raw)


def mixed_baseline(
    batch: RolloutBatch, weights: dict[str, float], estimator: str = "grpo", estimator_config: tuple = ()
) -> torch.Tensor:
    """The mixed pipeline: `R_mix = sum_c w_c scores[c]` first, then one estimator on it: (B, T)."""
    missing = [c for c in weights if c not in batch.scores]
    if missing:
        have = sorted(batch.scores)
        raise BatchError(f"mixed baseline: this run has no scores for {missing}; it has {have}")
    if weights:  # missing scores are skipped (nansum); no score on any channel stays NaN (unscorable)
        stacked = torch.stack([float(w) * batch.scores[c].to(torch.float32) for c, w in weights.items()])
        mixed = torch.where(torch.isnan(stacked).all(dim=0), torch.nan, torch.nansum(stacked, dim=0))
    else:
        mixed = torch.zeros(batch.B, dtype=torch.float32, device=batch.device)
    mixed_batch = dataclasses.replace(batch, scores={**batch.scores, "__mixed__": mixed})
    overrides = dict(estimator_config)
    overrides["channel"] = "__mixed__"
    config = registry.make_config(estimator, **overrides)
    return registry.estimate(estimator, mixed_batch, config).advantages


def dual_ascent(
    rates: torch.Tensor,
    tau: torch.Tensor,
    eta: float,
    beta0: torch.Tensor,
    mode: Literal["projected", "lexicographic"] = "projected",
    priority: tuple[int, ...] = (),
) -> torch.Tensor:
    """Replay constraint mode over S logged steps: the beta trajectory, (S + 1, C).

    projected: `beta_c <- max(0, beta_c + eta (rate_c - tau_c))` at every step for every channel.
    lexicographic: channels are served in `priority` order (indices into C; channels not listed come
    after, in index order). At a step, a channel's multiplier moves only when every channel before it
    meets its target (rate <= tau) at that step; otherwise it is held. So safety/format are settled
    before lower-priority constraints push on the policy.
    rates: (S, C) violation rate per step and channel; tau: (C,); beta0: (C,).
    """
    rates = torch.as_tensor(rates, dtype=torch.float64)
    tau = torch.as_tensor(tau, dtype=torch.float64)
    beta = torch.as_tensor(beta0, dtype=torch.float64).clone()
    if rates.dim() != 2 or rates.shape[1] != tau.shape[0] or beta.shape != tau.shape:
        raise ValueError(
            f"dual_ascent: rates (S, C), tau (C,), beta0 (C,) expected; got "
            f"{tuple(rates.shape)}, {tuple(tau.shape)}, {tuple(beta.shape)}"
        )
    if mode not in ("projected", "lexicographic"):
        raise ValueError(f"dual_ascent: unknown mode {mode!r}")
    C = tau.shape[0]
    if any(not 0 <= p < C for p in priority) or len(set(priority)) != len(priority):
        raise ValueError(f"dual_ascent: priority {priority!r} must list distinct channel indices < {C}")
    order = list(priority) + [c for c in range(C) if c not in priority]
    rank = torch.empty(C, dtype=torch.long)
    rank[torch.tensor(order, dtype=torch.long)] = torch.arange(C)
    out = [beta.clone()]
    for s in range(rates.shape[0]):  # one step per logged training step (S is small)
        step = eta * (rates[s] - tau)
        if mode == "lexicographic":
            violated = (rates[s] > tau)[torch.tensor(order)]  # in priority order
            blocked_before = torch.cumsum(violated.long(), 0) - violated.long()  # violations ahead
            active = (blocked_before == 0)[rank]
            step = torch.where(active, step, torch.zeros_like(step))
        beta = (beta + step).clamp(min=0.0)
        out.append(beta.clone())
    return torch.stack(out).to(torch.float32)
