"""The split-channel credit of a batch for the views and `explain` (numpy arrays per channel, with the
task channel's estimator chosen by the caller), and the dual-ascent replay of β over a run's steps."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from backend.core.arrays import to_numpy, to_tensor
from backend.core.batch import ALL_CHANNELS, BatchError, RolloutBatch, default_main_channel, missing_channel
from backend.credit import channels
from backend.credit.as_trained import TRAINER_ESTIMATORS
from backend.estimators import registry
from backend.estimators.methods.as_trained import parse_weights


@dataclass
class ChannelCredit:
    """The split-channel credit of a batch (one group, usually), as numpy arrays.

    final: (B, T) A_final = Σ_c β_c Ã_c; contributions: channel -> (B, T) β_c Ã_c;
    per_channel: channel -> (B, T) Ã_c (normalized, before β); betas: channel -> β_c.
    """

    final: np.ndarray
    contributions: dict[str, np.ndarray]
    per_channel: dict[str, np.ndarray]
    betas: dict[str, float]
    projected: dict[str, np.ndarray] = field(default_factory=dict)
    """channel -> (B, T) the projection before normalization (an estimator channel: its advantages)."""


def channel_specs(
    batch: RolloutBatch,
    estimator: str = "grpo",
    config: tuple = (),
    betas: dict[str, float] | None = None,
    normalizations: dict[str, str] | None = None,
    channel: str | None = None,
) -> dict:
    """The run's channel specs with `estimator` (overrides `config`), `betas` overriding β_c and
    `normalizations` overriding a channel's normalization (group, batch, none).

    The channels are computed the way the run's channels say, whichever channel a view looks at:
    every outcome channel (a scored channel whose default projection is an estimator: task and the
    unnamed ones) by `estimator` on its own score; the token-level channels (format/style spans, KL,
    length, process, broadcasts) by their own projection. `channel` (default: the batch's default main
    channel) is checked against the run's channels; it matters only to an estimator that reads no channel
    (`logged`: the trainer's whole advantage), which takes the place of every outcome channel, under the
    main outcome channel's name. `all` (the scores summed first) is a what-if beside A_final
    (`summed_config`), never inside it."""
    channel = default_main_channel(list(batch.scores)) if channel is None else channel
    if estimator in TRAINER_ESTIMATORS:
        specs = trainer_specs(batch, estimator, config, channel)
    else:
        specs = _with_estimator_on(channels.default_specs(batch), batch, channel, estimator, dict(config))
    if betas:
        specs = {c: (_replace_beta(s, betas[c]) if c in betas else s) for c, s in specs.items()}
    unknown = sorted(set(normalizations or {}) - set(specs))
    if unknown:
        raise ValueError(f"normalization for {unknown}: this run's channels are {sorted(specs)}")
    for c, mode in (normalizations or {}).items():
        specs[c] = dataclasses.replace(specs[c], normalization=mode)  # ChannelSpec checks the mode
    return specs


def trainer_specs(batch: RolloutBatch, estimator: str, config: tuple, channel: str) -> dict:
    """The trainer's advantage as channels: `as_trained` as one row per reward channel it summed (its term,
    w_c (R_c − mean_G R_c) / (std_G R + ε): the rows add up to what was trained), `logged` as one row under
    the main channel's name. β 1 and no normalization: the trainer's numbers as they are; no KL channel (the
    trainers put KL in the loss)."""
    pairs = tuple((k, v) for k, v in config if k not in ("channel", "term"))
    if estimator == "logged":
        name = channel if channel in batch.scores or channel == ALL_CHANNELS else "logged"
        return {name: channels.ChannelSpec(name, "estimator", "logged", normalization="none")}
    summed = list(parse_weights(str(dict(pairs).get("weights", "")))) or list(batch.scores)
    return {
        c: channels.ChannelSpec(c, "estimator", "as_trained", tuple(sorted((*pairs, ("term", c)))), "none")
        for c in summed
    }


def channel_credit(
    batch: RolloutBatch,
    estimator: str = "grpo",
    config: tuple = (),
    betas: dict[str, float] | None = None,
    projected: dict[str, torch.Tensor] | None = None,
    normalizations: dict[str, str] | None = None,
    channel: str | None = None,
) -> ChannelCredit:
    """Split-channel credit with estimator `estimator` (overrides `config`) on `channel` (see
    `channel_specs`) and each other channel projected by its default spec (docs/estimators.md, channels);
    `betas` override β_c. projected: estimator channels computed at their scope (see
    backend.views.explain.group_channel_credit)."""
    specs = channel_specs(batch, estimator, config, betas, normalizations, channel)
    result = channels.combine(batch, specs, projected)
    contributions = {c: to_numpy(v).astype(np.float32) for c, v in result.contributions.items()}
    per_channel = {c: to_numpy(v).astype(np.float32) for c, v in result.per_channel.items()}
    raw = {c: to_numpy(v).astype(np.float32) for c, v in result.projected.items()}
    used = {c: float(s.beta) for c, s in specs.items()}
    return ChannelCredit(to_numpy(result.final).astype(np.float32), contributions, per_channel, used, raw)


def split_channel_credit(batch: RolloutBatch, estimator: str = "grpo", config: tuple = ()) -> ChannelCredit:
    """The split-channel credit with every reward channel by itself, whatever the run's main channel: the
    default specs, with `estimator` (overrides `config`, its channel dropped) on each channel whose default
    is an estimator (task and the unnamed channels; an estimator without a channel parameter leaves them
    as they are). What the `channel_takeover` monitor reads on `all`, where `channel_credit` has one
    channel, the sum (docs/monitors.md)."""
    overrides = tuple(sorted((k, v) for k, v in config if k != "channel"))
    specs = channels.default_specs(batch)
    if _reads_a_channel(estimator):
        specs = {
            c: dataclasses.replace(s, estimator=estimator, estimator_config=overrides)
            if s.projection == "estimator" and c in batch.scores
            else s
            for c, s in specs.items()
        }
    result = channels.combine(batch, specs)
    contributions = {c: to_numpy(v).astype(np.float32) for c, v in result.contributions.items()}
    per_channel = {c: to_numpy(v).astype(np.float32) for c, v in result.per_channel.items()}
    used = {c: float(s.beta) for c, s in specs.items()}
    return ChannelCredit(to_numpy(result.final).astype(np.float32), contributions, per_channel, used)


def _reads_a_channel(estimator: str) -> bool:
    fields = dataclasses.fields(registry.get(estimator).config_cls)
    return any(f.name == "channel" for f in fields)


def _with_estimator_on(specs: dict, batch: RolloutBatch, channel: str, estimator: str, config: dict) -> dict:
    """`specs` with `estimator` projecting every outcome channel (no extra normalization: its advantages are
    already relative, as GRPO's Z is); see `channel_specs`."""
    config.pop("channel", None)  # the spec's name is the channel the estimator reads
    if channel != ALL_CHANNELS and channel not in specs:
        raise BatchError(missing_channel(channel, list(batch.scores)))
    outcome = [c for c, s in specs.items() if s.projection == "estimator" and c in batch.scores]
    overrides = tuple(sorted(config.items()))

    def spec(name: str) -> channels.ChannelSpec:
        return channels.ChannelSpec(
            name, "estimator", estimator, overrides, normalization="none", beta=specs[name].beta
        )

    if _reads_a_channel(estimator):
        return {c: (spec(c) if c in outcome else s) for c, s in specs.items()}
    if not outcome:
        return specs
    main = channel if channel in outcome else outcome[0]
    return {c: (spec(c) if c == main else s) for c, s in specs.items() if c == main or c not in outcome}


def summed_config(estimator: str, config: tuple = ()) -> tuple:
    """The what-if beside A_final: `estimator` on every channel's score summed per rollout first (`all`,
    as TRL trains with several reward functions), as (key, value) pairs; () when it reads no channel."""
    if not _reads_a_channel(estimator):
        return ()
    return tuple(sorted({**dict(config), "channel": ALL_CHANNELS}.items()))


def _replace_beta(spec, beta: float):
    return dataclasses.replace(spec, beta=float(beta))


# ---- dual ascent replay ----------------------------------------------------------------------------


def dual_ascent_replay(
    step_means: pd.DataFrame,
    tau: dict[str, float],
    eta: float,
    beta0: dict[str, float],
    mode: str = "projected",
    priority: tuple[str, ...] = (),
) -> pd.DataFrame:
    """Replay constraint mode over a run's logged steps (docs/estimators.md section 8).

    step_means: rows (step, channel, violation_rate) as `Store.step_channel_means` gives them;
    tau, beta0: per constrained channel. Returns rows (step, channel, beta, rate, tau) where `beta` is
    β_c after the update with that step's violation rate (plus a row at step "start" - 1 with β0).
    """
    names = [c for c in tau if c in set(step_means["channel"])]
    if not names:
        return pd.DataFrame(columns=["step", "channel", "beta", "rate", "tau"])
    wide = step_means.pivot(index="step", columns="channel", values="violation_rate").sort_index()
    wide = wide.reindex(columns=names).fillna(0.0)
    steps = wide.index.to_numpy()
    rates = to_tensor(wide.to_numpy(), torch.float64)  # (S, C)
    betas = channels.dual_ascent(
        rates,
        torch.tensor([tau[c] for c in names], dtype=torch.float64),
        float(eta),
        torch.tensor([beta0.get(c, 1.0) for c in names], dtype=torch.float64),
        mode,
        tuple(names.index(c) for c in priority if c in names),
    ).numpy()  # (S + 1, C)
    rows = []
    start = (steps[0] - 1) if len(steps) else -1
    for c, name in enumerate(names):
        rows.append(
            {"step": start, "channel": name, "beta": float(betas[0, c]), "rate": math.nan, "tau": tau[name]}
        )
        for s, step in enumerate(steps):
            rows.append(
                {
                    "step": int(step),
                    "channel": name,
                    "beta": float(betas[s + 1, c]),
                    "rate": float(rates[s, c]),
                    "tau": tau[name],
                }
            )
    return pd.DataFrame(rows)
