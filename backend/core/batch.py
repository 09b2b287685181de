"""The one tensor container every estimator reads: `RolloutBatch`.

Convention (see docs/estimators.md): everything is `(B, T)` plus `response_mask`; padding is False in the
mask and 0 in every tensor. Per-token fields that a run does not have are `None`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

import numpy as np
import torch

from backend.core.arrays import to_tensor

# The names without tensors live in batch_fields (importable without torch); re-exported for the callers
# that hold a batch anyway.
from backend.core.batch_fields import (  # noqa: F401
    ALL_CHANNELS,
    MC_EXTRAS,
    MODEL_FILLED,
    MODEL_SCORE_EXTRAS,
    MODEL_SCORED,
    OPTIONAL_FIELDS,
    PER_TOKEN_FIELDS,
    BatchError,
    default_main_channel,
    missing_channel,
    model_score_needs,
)
from backend.core.turns import spans_from_mask


@dataclass(frozen=True)
class RolloutBatch:
    """A padded batch of responses.

    response_mask: (B, T) bool, True on real response tokens
    token_ids: (B, T) int64, 0 on padding
    group_ids: (B,) int64, responses of the same prompt share an id
    rollout_ids: (B,) int64, stable ids within the run (for messages and joins)
    steps: (B,) int64, training step
    scores: channel -> (B,) float32 sequence score; NaN where a rollout has no score on the channel
        (left out of that channel's group statistics, Z = 0: see `functional.outcome_center_scale`)
    token_rewards: channel -> (B, T) float32 token-local reward
    logprobs, ref_logprobs, entropies, values: (B, T) float32 or None
    tokens: display text per token, one list per response (length L_i), or None
    extras: name -> (B, T) or (B,) tensors a run carries beyond the standard fields
        (synthetic runs: `true_credit`, `key_mask`, `style_mask`, `decision_signal`;
        resampling: `mc_values`, `mc_mask`; models: `hidden` (B, T, H))
    token_text: None, or the token text of the real tokens as one flat Arrow string array in row-major
        order (what the store reads for outputs that write every token; `select` drops it)
    run_fit: None, or the `backend.estimators.fitting.RunFit` of the run this batch is a chunk of (models
        fitted on the whole run collect from it, then apply to it; None: they fit on this batch)
    loss_mask: (B, T) bool, True on the real tokens the trainer trains; None: every real token is trained.
        Tool outputs and environment observations of an agent run are real tokens with loss_mask False:
        they stay in the rows a view or `estimate` shows, and get no credit (`trained`)
    turns: None, or per response its turns as (role, start, end) token spans, end exclusive
    turn_rewards: None, or per response one score (or None) per assistant turn
    """

    response_mask: torch.Tensor
    token_ids: torch.Tensor
    group_ids: torch.Tensor
    rollout_ids: torch.Tensor
    steps: torch.Tensor
    scores: dict[str, torch.Tensor] = field(default_factory=dict)
    token_rewards: dict[str, torch.Tensor] = field(default_factory=dict)
    logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    entropies: torch.Tensor | None = None
    values: torch.Tensor | None = None
    tokens: list[list[str]] | None = None
    extras: dict[str, torch.Tensor] = field(default_factory=dict)
    token_text: object | None = field(default=None, compare=False, repr=False)
    run_fit: object | None = field(default=None, compare=False, repr=False)
    loss_mask: torch.Tensor | None = None
    turns: list[list[tuple[str, int, int]]] | None = None
    turn_rewards: list[list[float | None]] | None = None

    @property
    def B(self) -> int:  # noqa: N802 - paper notation
        return int(self.response_mask.shape[0])

    @property
    def T(self) -> int:  # noqa: N802 - paper notation
        return int(self.response_mask.shape[1])

    @property
    def device(self) -> torch.device:
        return self.response_mask.device

    @property
    def lengths(self) -> torch.Tensor:
        """L_i: (B,) int64 number of real tokens per response."""
        return self.response_mask.sum(dim=1)

    @property
    def trained_mask(self) -> torch.Tensor:
        """(B, T) bool: the real tokens the trainer trains (`response_mask` and `loss_mask`)."""
        if self.loss_mask is None:
            return self.response_mask
        return self.response_mask & self.loss_mask.to(self.response_mask.device).bool()

    def trained(self) -> RolloutBatch:
        """The batch estimators see: `response_mask` narrowed to the trained tokens, so an untrained token
        (a tool's output, an environment's observation) is a hole like padding: it gets exactly 0, and no
        mean, weight, position or group statistic counts it (positions count real tokens only). Done once,
        here, by `registry.estimate` and the loop twins' entry, never per estimator."""
        if self.loss_mask is None:
            return self
        trained = self.trained_mask
        tokens = None
        if self.tokens is not None:  # per response the text of its real tokens: keep the trained ones'
            keep = trained[self.response_mask].cpu().tolist()  # flat, row-major over the real tokens
            tokens, offset = [], 0
            for row in self.tokens:
                tokens.append(
                    [text for text, k in zip(row, keep[offset : offset + len(row)], strict=True) if k]
                )
                offset += len(row)
        return replace(self, response_mask=trained, loss_mask=None, tokens=tokens, token_text=None)

    def to(self, device: str | torch.device) -> RolloutBatch:
        def move(x):
            return x.to(device) if isinstance(x, torch.Tensor) else x

        return replace(
            self,
            **{
                f.name: (
                    {k: move(v) for k, v in getattr(self, f.name).items()}
                    if isinstance(getattr(self, f.name), dict)
                    else move(getattr(self, f.name))
                )
                for f in fields(self)
            },
        )

    def select(self, index: torch.Tensor | list[int]) -> RolloutBatch:
        """Rows `index` of the batch (keeps T)."""
        idx = torch.as_tensor(index, dtype=torch.long, device=self.device)

        def take(x):
            if isinstance(x, torch.Tensor) and x.dim() >= 1 and x.shape[0] == self.B:
                return x.index_select(0, idx)
            return x

        return replace(
            self,
            response_mask=take(self.response_mask),
            token_ids=take(self.token_ids),
            group_ids=take(self.group_ids),
            rollout_ids=take(self.rollout_ids),
            steps=take(self.steps),
            scores={k: take(v) for k, v in self.scores.items()},
            token_rewards={k: take(v) for k, v in self.token_rewards.items()},
            logprobs=take(self.logprobs),
            ref_logprobs=take(self.ref_logprobs),
            entropies=take(self.entropies),
            values=take(self.values),
            tokens=None if self.tokens is None else [self.tokens[i] for i in idx.tolist()],
            extras={k: take(v) for k, v in self.extras.items()},
            token_text=None,
            loss_mask=take(self.loss_mask),
            turns=None if self.turns is None else [self.turns[i] for i in idx.tolist()],
            turn_rewards=None if self.turn_rewards is None else [self.turn_rewards[i] for i in idx.tolist()],
        )

    def require(self, *names: str) -> None:
        """Raise a clear error when an estimator needs a per-token field this run lacks."""
        missing = [n for n in names if getattr(self, n, None) is None and n not in self.extras]
        if not missing:
            return
        how = []
        scorable = [n for n in missing if n in MODEL_FILLED]
        logged = [n for n in missing if n == "logged_advantage"]
        other = [n for n in missing if n not in scorable and n not in logged]
        if scorable:
            how.append(f"fill {', '.join(scorable)} with `creditlens score --model DIR` (the policy model)")
        if logged:
            how.append(
                "the trainer's own advantage cannot be recomputed: import a log that carries it "
                "(TRL's completions parquet has an `advantage` column; a native record a "
                "`logged_advantage`)"
            )
        if other:
            how.append(f"import {', '.join(other)} with the run")
        raise BatchError(f"this run has no {', '.join(missing)}; {'; '.join(how)}")

    def with_channel_sum(self, name: str = ALL_CHANNELS) -> RolloutBatch:
        """The batch with one more channel `name`: per rollout the sum of its channel scores, skipping
        missing ones (nansum); NaN where a rollout has no score on any channel (unscorable). This is
        TRL's combined reward with weights 1."""
        if not self.scores:
            raise BatchError("this run has no scores on any channel")
        stacked = torch.stack([v.to(torch.float32) for v in self.scores.values()])  # (C, B)
        total = torch.nansum(stacked, dim=0)  # (B,)
        total = torch.where(torch.isnan(stacked).all(dim=0), torch.nan, total)
        return replace(self, scores={**self.scores, name: total})

    def validate(self) -> None:
        """Raise `BatchError` naming the field and rollout id of the first NaN/inf (a missing score, NaN
        in `scores`, is allowed; an infinite one is not)."""
        checks: list[tuple[str, torch.Tensor | None]] = [(f, getattr(self, f)) for f in PER_TOKEN_FIELDS]
        checks += [(f"scores[{k}]", v) for k, v in self.scores.items()]
        checks += [(f"token_rewards[{k}]", v) for k, v in self.token_rewards.items()]
        for name, tensor in checks:
            if tensor is None or not tensor.is_floating_point():
                continue
            bad = torch.isinf(tensor) if name.startswith("scores[") else ~torch.isfinite(tensor)
            if tensor.dim() == 2:
                bad = bad & self.response_mask
            if bool(bad.any()):
                row = int(bad.reshape(bad.shape[0], -1).any(dim=1).nonzero()[0, 0])
                rid = int(self.rollout_ids[row])
                raise BatchError(f"{name} of rollout {rid} is NaN or infinite")


def _pad(rows: list, T: int, dtype: torch.dtype) -> torch.Tensor:
    out = torch.zeros((len(rows), T), dtype=dtype)
    for i, row in enumerate(rows):
        if row is not None and len(row):
            out[i, : len(row)] = to_tensor(row, dtype)
    return out


def batch_from_records(records: list[dict], device: str | torch.device = "cpu") -> RolloutBatch:
    """Build a batch from native-format-like dicts (tests, synthetic runs, the store's loader).

    Each record: `token_ids` (list[int]), `group_id` (int), optional `rollout_id`, `step`,
    `scores` (dict channel -> float; a channel a record lacks is NaN), `token_rewards` (dict channel ->
    list), `logprobs`, `ref_logprobs`, `entropies`, `values` (lists), `tokens` (list[str]), `extras`
    (dict name -> list), `loss_mask` (list of 0/1), `turns` (list of {role, start, end} or (role, start,
    end)), `turn_rewards` (list of float or None).
    """
    lengths = [len(r["token_ids"]) for r in records]
    T = max(lengths, default=0)
    mask = torch.zeros((len(records), T), dtype=torch.bool)
    for i, L in enumerate(lengths):
        mask[i, :L] = True

    def per_token(name):
        if not records or any(r.get(name) is None for r in records):
            return None
        return _pad([r[name] for r in records], T, torch.float32)

    channels = sorted({c for r in records for c in r.get("scores", {})})
    token_channels = sorted({c for r in records for c in (r.get("token_rewards") or {})})
    extra_names = sorted({c for r in records for c in (r.get("extras") or {})})
    batch = RolloutBatch(
        response_mask=mask,
        token_ids=_pad([r["token_ids"] for r in records], T, torch.long),
        group_ids=torch.tensor([int(r.get("group_id", 0)) for r in records], dtype=torch.long),
        rollout_ids=torch.tensor(
            [int(r.get("rollout_id", i)) for i, r in enumerate(records)], dtype=torch.long
        ),
        steps=torch.tensor([int(r.get("step", 0)) for r in records], dtype=torch.long),
        scores={
            c: torch.tensor([float(r["scores"].get(c, math.nan)) for r in records], dtype=torch.float32)
            for c in channels
        },
        token_rewards={
            c: _pad([(r.get("token_rewards") or {}).get(c) for r in records], T, torch.float32)
            for c in token_channels
        },
        logprobs=per_token("logprobs"),
        ref_logprobs=per_token("ref_logprobs"),
        entropies=per_token("entropies"),
        values=per_token("values"),
        tokens=[list(r["tokens"]) for r in records]
        if records and all(r.get("tokens") for r in records)
        else None,
        extras={
            c: (
                _pad([(r.get("extras") or {}).get(c) for r in records], T, torch.float32)
                if any(isinstance((r.get("extras") or {}).get(c), (list, tuple, np.ndarray)) for r in records)
                else torch.tensor([float((r.get("extras") or {}).get(c, math.nan)) for r in records])
            )
            for c in extra_names
        },
        loss_mask=(
            _pad([r.get("loss_mask", [1] * len(r["token_ids"])) for r in records], T, torch.bool)
            if any(r.get("loss_mask") is not None for r in records)
            else None
        ),
        turns=(
            [[turn_span(t) for t in _turns_of(r)] for r in records]
            if any(r.get("turns") or r.get("loss_mask") is not None for r in records)
            else None
        ),
        turn_rewards=(
            [list(r.get("turn_rewards") or []) for r in records]
            if any(r.get("turn_rewards") for r in records)
            else None
        ),
    )
    return batch.to(device)


def _turns_of(record: dict) -> list:
    """A record's turns; where it has a loss mask and no turns, the mask's runs."""
    if record.get("turns"):
        return record["turns"]
    mask = record.get("loss_mask")
    return [] if mask is None else spans_from_mask(mask)


def turn_span(turn) -> tuple[str, int, int]:
    """(role, start, end) of a turn given as a dict {role, start, end} or as the tuple itself."""
    if isinstance(turn, dict):
        return str(turn["role"]), int(turn["start"]), int(turn["end"])
    role, start, end = turn
    return str(role), int(start), int(end)
