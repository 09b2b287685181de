"""Why a token got its credit: the Rollout view's numbers and `creditlens explain`, from one code path.

`explain_rollout` gives, for one rollout: its tokens, each channel's projection (an outcome channel: the
estimator's output on it, equal to `creditlens estimate --channel C`) and contribution β_c·Ã_c, the final
advantage, and the estimator's `terms`: the intermediate quantities behind its number, taken from the
estimator's diagnostics at its declared scope and sliced to the rollout. `derivation` turns the terms at
one token into a short derivation with the numbers, e.g. `A_t = Z · w_t / mean w = 0.540 × 1.83 = 0.99`;
each estimator's derivation is written beside it (backend/estimators/explaining.py has the shared steps).
`Explanation.channel_derivation` derives every channel's term (backend/views/channel_derivation.py), and
the final advantage never depends on the channel looked at: `channel` picks the derivation shown, and
`all` (the scores summed first) is a labelled what-if beside the final.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from backend.core.batch import RolloutBatch
from backend.core.errors import InputError
from backend.credit import as_trained, channel_credit, channels, estimates, main_channel
from backend.estimators import explaining, registry
from backend.store import StoreHandle
from backend.views import channel_derivation, strips


@dataclass
class Explanation:
    """One rollout's credit, channel by channel, with the estimator's terms.

    tokens: (L,) token text; channels: name -> {"advantage": (L,), "contribution": (L,)};
    final: (L,) A_final; betas: name -> β_c; terms: see `terms_of`; batch/row: the rollout's group
    batch and its row (for per-token facts; `to_json` adds the per-token strips of `backend.views.strips`)."""

    rollout_id: int
    group_id: int
    estimator: str
    scope: str
    tokens: list[str]
    channels: dict[str, dict[str, np.ndarray]]
    final: np.ndarray
    betas: dict[str, float]
    terms: dict[str, Any]
    batch: RolloutBatch
    row: int
    channel: str = "task"
    """The channel whose derivation is looked at (`terms` are the estimator's on it, or on the main outcome
    channel when it is a token-level one); A_final does not depend on it."""
    specs: dict[str, channels.ChannelSpec] = field(default_factory=dict)
    projected: dict[str, np.ndarray] = field(default_factory=dict)
    """channel -> (B, T) its projection over the group's batch (the normalization's statistics)."""
    channel_terms: dict[str, dict] = field(default_factory=dict)
    """outcome channel -> the estimator's terms on it (`terms_of`)."""
    what_if: dict | None = None
    """With `channel` `all`: {"channel", "label", "advantage": (L,), "terms"}, the estimator on the scores
    summed first, shown beside A_final and never inside it."""

    def channel_derivation(self, name: str, t: int | None) -> list[str]:
        """Channel `name`'s term of A_final at token t, derived with its numbers (None: its recipe)."""
        spec = self.specs[name]
        if t is None:
            return [channel_derivation.recipe(spec)]
        if self.untrained_at(t):
            return untrained_derivation()
        terms = self.channel_terms.get(name)
        own = None if terms is None else (lambda i: derivation(terms, i))
        contribution = float(self.channels[name]["contribution"][t])
        return channel_derivation.channel_lines(
            spec, self.batch, self.row, t, self.projected[name], contribution, own
        )

    def untrained_at(self, t: int) -> bool:
        """Whether token t is outside the loss mask (a tool's output): no estimator credits it."""
        return untrained_at(self.batch, self.row, t)

    def final_derivation(self, t: int) -> list[str]:
        if self.untrained_at(t):
            return untrained_derivation()
        parts = {c: float(p["contribution"][t]) for c, p in self.channels.items()}
        return [channel_derivation.final_line(parts, float(self.final[t]))]

    def derivation_at(self, t: int, terms: dict | None = None) -> list[str]:
        """The estimator's derivation at t from `terms` (default: the what-if's, else its own `terms`);
        at an untrained token the one line of `untrained_derivation`."""
        if self.untrained_at(t):
            return untrained_derivation()
        if terms is None:
            terms = self.what_if["terms"] if self.what_if is not None else self.terms
        return derivation(terms, t)

    def to_json(self, pos: int | None = None) -> dict:
        """Everything as JSON; each channel's `derivation` is at token `pos` (None: its recipe)."""

        def floats(x):
            return [None if not math.isfinite(v) else float(v) for v in np.asarray(x, dtype=np.float64)]

        out_channels = {}
        for c, parts in self.channels.items():
            spec = self.specs.get(c)
            entry = {k: floats(v) for k, v in parts.items()}
            if spec is not None:
                entry.update(projection=spec.projection, normalization=spec.normalization, beta=spec.beta)
                entry["derivation"] = {"pos": pos, "lines": self.channel_derivation(c, pos)}
            out_channels[c] = entry
        out = {
            "rollout_id": self.rollout_id,
            "group_id": self.group_id,
            "estimator": self.estimator,
            "channel": self.channel,
            "scope": self.scope,
            "tokens": self.tokens,
            "channels": out_channels,
            "final": floats(self.final),
            "betas": self.betas,
            "terms": self.terms,
            "strips": {k: floats(v) for k, v in strips.token_strips(self.batch, self.row).items()},
        }
        if pos is not None:
            out["final_derivation"] = {"pos": pos, "lines": self.final_derivation(pos)}
        if self.what_if is not None:
            what = self.what_if
            out["what_if"] = {
                "channel": what["channel"],
                "label": what["label"],
                "advantage": floats(what["advantage"]),
                "derivation": {"pos": pos, "lines": [] if pos is None else self.derivation_at(pos)},
            }
        return out


def tokens_of(batch: RolloutBatch, row: int) -> list[str]:
    L = int(batch.lengths[row])
    if batch.tokens is not None:
        return list(batch.tokens[row])
    return [str(t) for t in batch.token_ids[row, :L].tolist()]


def group_channel_credit(
    handle: StoreHandle,
    run: str,
    group_id: int,
    estimator: str,
    config: tuple = (),
    betas: dict[str, float] | None = None,
    progress: estimates.Progress | None = None,
    normalizations: dict[str, str] | None = None,
    save: bool = True,
    channel: str | None = None,
) -> tuple[RolloutBatch, channel_credit.ChannelCredit]:
    """The split-channel credit of one group with `estimator` on `channel` (a `channel` in `config`
    wins; default: the run's main channel), every estimator channel computed at its declared scope
    (through the store's cache), so the numbers equal `creditlens estimate` on the whole run."""
    channel = main_channel.resolve(handle, run, dict(config).get("channel", channel))
    with handle.read() as store:
        batch = store.load_batch(run, group_ids=[int(group_id)])
        found = as_trained.recipe(store, run)
    ids = batch.rollout_ids.tolist()
    projected = {}
    specs = channel_credit.channel_specs(batch, estimator, config, betas, normalizations, channel)
    # the trainer's reward weights and KL coefficient, where it has them, under any tuned β
    if estimator not in as_trained.TRAINER_ESTIMATORS:
        betas = {**as_trained.trainer_betas(found, list(specs)), **(betas or {})} or None
    for name, spec in specs.items():
        if spec.projection == "estimator":
            cfg = channels.estimator_config(spec)
            scoped = estimates.estimate_rollouts(
                handle, run, spec.estimator, cfg, ids, progress=progress, save=save
            )
            projected[name] = scoped.padded(ids, batch.T)
    return batch, channel_credit.channel_credit(
        batch, estimator, config, betas, projected, normalizations, channel
    )


def explain_rollout(
    handle: StoreHandle,
    run: str,
    rollout_id: int,
    estimator: str,
    config: tuple = (),
    channel: str | None = None,
    betas: dict[str, float] | None = None,
    normalizations: dict[str, str] | None = None,
) -> Explanation:
    """Everything the Rollout view draws for `rollout_id` under `estimator` (overrides `config`, a tuple
    of (key, value)); `channel` (default: the run's main channel) picks the derivation looked at, never the
    credit: `terms` are the estimator's on it (on the main outcome channel when it is token-level), and on
    `all` the estimator on the scores summed first is a what-if beside A_final."""
    channel = main_channel.resolve(handle, run, dict(config).get("channel", channel))
    with handle.read() as store:
        index = store.rollout_keys(run)
    match = index[index["rollout_id"] == int(rollout_id)]
    if match.empty:
        raise InputError(f"run {run!r} has no rollout {rollout_id}")
    group_id = int(match["group_id"].iloc[0])
    batch, credit = group_channel_credit(
        handle, run, group_id, estimator, config, betas, normalizations=normalizations, channel=channel
    )
    specs = channel_credit.channel_specs(batch, estimator, config, credit.betas, normalizations, channel)
    row = int((batch.rollout_ids == int(rollout_id)).nonzero()[0, 0])
    L = int(batch.lengths[row])
    parts = {
        c: {
            "advantage": credit.projected[c][row, :L],
            "normalized": credit.per_channel[c][row, :L],
            "contribution": credit.contributions[c][row, :L],
        }
        for c in credit.contributions
    }
    channel_terms = {
        c: scoped_terms(handle, run, int(rollout_id), spec.estimator, channels.estimator_config(spec))
        for c, spec in specs.items()
        if spec.projection == "estimator"
    }
    what_if = None
    summed = channel_credit.summed_config(estimator, config)
    if channel == estimates.ALL_CHANNELS and summed and estimates.ALL_CHANNELS not in specs:
        built = registry.make_config(estimator, **dict(summed))
        scoped = estimates.estimate_rollouts(handle, run, estimator, built, [int(rollout_id)])
        what_if = {
            "channel": estimates.ALL_CHANNELS,
            "label": f"what-if: {estimator} on the channel scores summed first (not part of A_final)",
            "advantage": scoped.padded([int(rollout_id)], L)[0].numpy(),
            "terms": scoped_terms(handle, run, int(rollout_id), estimator, built),
        }
    if channel in channel_terms:
        terms = channel_terms[channel]
    elif what_if is not None:
        terms = what_if["terms"]
    elif channel_terms:
        terms = next(iter(channel_terms.values()))
    else:
        built = registry.make_config(estimator, **dict(main_channel.on_channel(estimator, config, channel)))
        terms = scoped_terms(handle, run, int(rollout_id), estimator, built)
    return Explanation(
        int(rollout_id),
        group_id,
        estimator,
        terms["scope"],
        tokens_of(batch, row),
        parts,
        credit.final[row, :L],
        credit.betas,
        terms,
        batch,
        row,
        channel,
        specs,
        credit.projected,
        channel_terms,
        what_if,
    )


def scoped_terms(handle: StoreHandle, run: str, rollout_id: int, estimator: str, config: Any) -> dict:
    """The estimator's terms for one rollout, computed on the batch of its declared scope."""
    scope = registry.get(estimator).scope_for(config)
    # a model fitted on the run in a first streamed pass applies to the rollout's group alone
    run_fit = estimates.fitted_run(handle, run, estimator, config) if scope == "run" else None
    with handle.read() as store:
        if scope == "run" and run_fit is None:
            batch = store.load_batch(run)
        elif run_fit is not None:
            info = store.rollout_keys(run)
            group = int(info.loc[info["rollout_id"] == int(rollout_id), "group_id"].iloc[0])
            batch = dataclasses.replace(store.load_batch(run, group_ids=[group]), run_fit=run_fit)
        else:
            info = store.rollout_keys(run)
            info = info[info["rollout_id"] == int(rollout_id)].iloc[0]
            batch = (
                store.load_batch(run, steps=[int(info["step"])])
                if scope == "step"
                else store.load_batch(run, group_ids=[int(info["group_id"])])
            )
        mc = store.resample_values(run, int(rollout_id)) if registry.MC_NEEDS[0] in batch.extras else None
    batch = estimates.with_channel(batch, estimates.channel_key(config))
    result = registry.estimate(estimator, batch, config)
    row = int((batch.rollout_ids == int(rollout_id)).nonzero()[0, 0])
    terms = terms_of(batch, result, row, estimator, config)
    if (
        mc is not None
        and not mc.empty
        and ("mc_mask" in terms["tokens"] or terms["notes"].get("value_source") == "mc")
    ):
        # The Monte Carlo values that fed it: V̂(s_t) ± stderr over n sampled suffixes, reward units.
        terms["mc"] = [
            {"pos": int(r.pos), "value": float(r.value), "stderr": float(r.stderr), "n": int(r.n)}
            for r in mc.itertuples()
        ]
    return terms


def terms_of(
    batch: RolloutBatch, result: registry.EstimatorResult, row: int, estimator: str, config: Any
) -> dict:
    """The estimator's intermediate quantities for response `row`, in one documented form:

    - `sequence`: name -> float, per-response numbers (Z; for outcome-based estimators also R, the group
      mean and std of R over the responses that have a score, n and ε);
    - `tokens`: name -> (L,) list of floats, per-token quantities (weights w, token rewards r, values
      V(s_t), the base advantage of a modifier, masks as 0/1, ...) and always `advantage`;
    - `notes`: name -> text (value source, fallbacks, feature names);
    - `scope`, `estimator`, `config` (field -> value).
    """
    L = int(batch.lengths[row])
    sequence: dict[str, float] = {}
    tokens: dict[str, list[float]] = {}
    notes: dict[str, Any] = {}
    for key, value in result.diagnostics.items():
        if isinstance(value, torch.Tensor):
            if value.dim() == 0:
                sequence[key] = float(value)
            elif value.dim() == 1 and value.shape[0] == batch.B:
                sequence[key] = float(value[row])
            elif value.dim() == 2 and value.shape[0] == batch.B:
                tokens[key] = value[row, :L].detach().to(torch.float64).cpu().tolist()
            elif key == "feature_contributions" and value.dim() == 3 and value.shape[0] == batch.B:
                names = result.diagnostics.get("features") or [str(i) for i in range(value.shape[2])]
                per_feature = value[row, :L].detach().to(torch.float64).cpu().T.tolist()  # (F, L)
                tokens.update({f"feature:{n}": vals for n, vals in zip(names, per_feature, strict=True)})
        elif isinstance(value, (str, int, float, bool)) or value is None:
            if value is not None:
                notes[key] = value
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            notes[key] = list(value)
    tokens["advantage"] = result.advantages[row, :L].detach().to(torch.float64).cpu().tolist()
    channel = getattr(config, "channel", None)
    if channel is not None and channel in batch.scores:
        sequence.update(_outcome_terms(batch, row, channel, getattr(config, "epsilon", None)))
    spec = registry.get(estimator)
    return {
        "estimator": estimator,
        "scope": spec.scope_for(config),
        "config": {
            k: (v if isinstance(v, (int, float, str, bool)) or v is None else str(v))
            for k, v in vars(config).items()
        },
        "sequence": {k: _finite(v) for k, v in sequence.items()},
        "tokens": {k: [_finite(v) for v in vals] for k, vals in tokens.items()},
        "notes": notes,
    }


def _finite(v: float) -> float | None:
    return float(v) if math.isfinite(v) else None


def _outcome_terms(batch: RolloutBatch, row: int, channel: str, epsilon: float | None) -> dict[str, float]:
    """R of the response and the statistics of its group (unbiased std), over responses with a score."""
    scores = batch.scores[channel].to(torch.float64)
    same = (batch.group_ids == batch.group_ids[row]) & torch.isfinite(scores)
    R = scores[same]
    out = {
        "R": float(scores[row]),
        "group_mean": float(R.mean()) if R.numel() else math.nan,
        "group_std": float(R.std()) if R.numel() > 1 else 0.0,
        "group_n": float(R.numel()),
    }
    if epsilon is not None:
        out["epsilon"] = float(epsilon)
    return out


NOT_TRAINED = "not trained: A = 0"
"""The whole derivation at a token outside the loss mask: no estimator, channel or β reaches it."""


def untrained_at(batch: RolloutBatch, row: int, t: int) -> bool:
    """Whether token t of response `row` is outside the run's stored loss mask (False without one)."""
    inside = strips.loss_mask(batch, row)
    return inside is not None and 0 <= t < len(inside) and not bool(inside[t])


def untrained_derivation() -> list[str]:
    """The derivation at an untrained token: one line, no formula (its terms would not add up to its 0)."""
    return [NOT_TRAINED]


def derivation(terms: dict, t: int) -> list[str]:
    """A short derivation of A_t from the terms, with the numbers (one formula per line): the estimator's
    own (registered with it, `EstimatorSpec.explain`), else A_t itself with every per-token term at t."""
    v = explaining.Terms(terms, t)
    lines = registry.get(terms["estimator"]).explain(v)
    if v.A is not None and not any("A_t" in line for line in lines):
        lines = [*lines, *explaining.every_term(v)]
    return lines
