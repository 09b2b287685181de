"""β and τ on the whole run: the numbers of `creditlens tune` and of the Tune view.

- `thresholds`: each scored channel's violation threshold. A violation is a score below it: by default 0
  for a channel that goes negative (a penalty), 1 for a 0/1 reward (a failure), 0.5 for scores in [0, 1]
  (below half marks), and 0 otherwise (nothing counts until a threshold is set).
- `replay`: projected (or lexicographic) dual ascent over the run's logged steps, one row per step and
  constrained channel: `step`, `channel`, `violation_rate`, `beta` (after that step's update), `tau`,
  `threshold`, `n` (rollouts scored). A constrained channel is one with its own β in the split credit
  other than the channel the estimator reads: on `all` the channel scores are summed and share one β, so
  there is none (a τ only where a β can follow it).
- `run_effect`: what a β does to the whole run, before (the default β) and after: each channel's share of
  Σ|β_c Ã_c| and each token class's share of Σ|A_final| (with its share of tokens), per step and over the
  run. Ã_c does not depend on β, so each step's channel credit is computed once and weighed twice.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from backend.core.batch import ALL_CHANNELS
from backend.core.errors import InputError
from backend.credit import channel_credit, channels, credit_summary, estimates, main_channel
from backend.store import StoreHandle

DEFAULT_TAU = 0.1
DEFAULT_ETA = 1.0
MODES = ("projected", "lexicographic")
REPLAY_COLUMNS = ["step", "channel", "violation_rate", "beta", "tau", "threshold", "n"]
EFFECT_COLUMNS = ["step", "which", "kind", "name", "abs", "share", "token_share"]


@dataclass(frozen=True)
class Threshold:
    """A channel's violation threshold: a score below `value` is a violation. `default` is what the
    channel's scores give (`why` says how); `low`, `high`: the run's lowest and highest score."""

    channel: str
    value: float
    default: float
    why: str
    low: float
    high: float


def default_threshold(low: float, high: float, binary: bool) -> tuple[float, str]:
    """The default threshold of a channel with scores in [low, high] (`binary`: every score is 0 or 1)."""
    if low < 0:
        return 0.0, "goes negative: a penalty, a score below 0 is a violation"
    if binary:
        return 1.0, "0/1 reward: a failure (a score below 1) is a violation"
    if high <= 1:
        return 0.5, "scores in [0, 1]: below half marks is a violation"
    return 0.0, "never negative and not in [0, 1]: nothing is a violation until a threshold is set"


def thresholds(
    handle: StoreHandle, run: str, violation: dict[str, float] | None = None
) -> dict[str, Threshold]:
    """Every scored channel's threshold: `violation` (channel -> threshold) where given, else the default."""
    with handle.read() as store:
        ranges = store.channel_score_ranges(run)
    out = {}
    for r in ranges.itertuples(index=False):
        value, why = default_threshold(float(r.low), float(r.high), bool(r.binary))
        chosen = float((violation or {}).get(r.channel, value))
        out[str(r.channel)] = Threshold(str(r.channel), chosen, value, why, float(r.low), float(r.high))
    unknown = sorted(set(violation or {}) - set(out))
    if unknown:
        raise InputError(f"--violation {unknown[0]}: run {run!r} has no scores on it; it has {sorted(out)}")
    return out


def _specs(handle: StoreHandle, run: str, channel: str) -> dict:
    """The default channel specs of the run on `channel` (read from its first group: which channels
    have a β does not change from group to group)."""
    with handle.read() as store:
        keys = store.rollout_keys(run)
        if keys.empty:
            raise InputError(f"run {run!r} has no rollouts")
        batch = store.load_batch(run, group_ids=[int(keys["group_id"].iloc[0])])
    return channel_credit.channel_specs(batch, channel=channel)


def default_betas(handle: StoreHandle, run: str, channel: str | None = None) -> dict[str, float]:
    """β_c of every channel with a β in the split credit on `channel` (its defaults: 1, KL 0.05)."""
    channel = main_channel.resolve(handle, run, channel)
    return {c: s.beta for c, s in _specs(handle, run, channel).items()}


def constrained(handle: StoreHandle, run: str, channel: str | None = None) -> list[str]:
    """The channels a τ can constrain on `channel`: scored, with a β of their own in the split credit, and
    not the channel looked at. A channel summed into another's one β (`all` read by the estimator) has
    no β of its own to follow a τ."""
    channel = main_channel.resolve(handle, run, channel)
    with handle.read() as store:
        scored = store.channels_of(store.run_id(run))
    return [c for c in _specs(handle, run, channel) if c in scored and c != channel]


def replay(
    handle: StoreHandle,
    run: str,
    tau: dict[str, float],
    eta: float = DEFAULT_ETA,
    beta0: dict[str, float] | None = None,
    mode: str = "projected",
    violation: dict[str, float] | None = None,
) -> pd.DataFrame:
    """Dual ascent over the run's logged steps for the channels of `tau` (in priority order), rows
    REPLAY_COLUMNS; `beta` is β_c after the update with that step's violation rate, from `beta0` (default 1).
    `violation`: thresholds (default: `thresholds`)."""
    if mode not in MODES:
        raise InputError(f"--mode {mode!r}: use one of {', '.join(MODES)}")
    _check_numbers(tau, eta, beta0 or {})
    limits = {c: t.value for c, t in thresholds(handle, run, violation).items()}
    with handle.read() as store:
        means = store.step_channel_means(run, limits)
    frame = channel_credit.dual_ascent_replay(
        means, dict(tau), eta, dict(beta0 or {}), mode, priority=tuple(tau)
    )
    if frame.empty:
        return pd.DataFrame(columns=REPLAY_COLUMNS)
    frame = frame[frame["step"] >= means["step"].min()].rename(columns={"rate": "violation_rate"})
    counts = means.set_index(["step", "channel"])["n"]
    # β is replayed in float32 (channels.dual_ascent): 6 significant digits are all it holds
    frame["beta"] = [float(f"{b:.6g}") for b in frame["beta"]]
    frame["threshold"] = frame["channel"].map(limits)
    frame["n"] = [int(counts.get((s, c), 0)) for s, c in zip(frame["step"], frame["channel"], strict=True)]
    return frame[REPLAY_COLUMNS].sort_values(["step", "channel"], kind="stable").reset_index(drop=True)


def _check_numbers(tau: dict[str, float], eta: float, beta0: dict[str, float]) -> None:
    """The replay's inputs in their ranges (an InputError names the first that is not): a negative η or β
    would turn the ascent into a descent and a penalty into a bonus."""
    if not (math.isfinite(eta) and eta >= 0):
        raise InputError(f"--eta {eta:g}: the dual step size η is a number ≥ 0")
    for c, b in beta0.items():
        if not (math.isfinite(b) and b >= 0):
            raise InputError(f"--beta {c}={b:g}: β is a number ≥ 0")
    for c, t in tau.items():
        if not (math.isfinite(t) and 0 <= t <= 1):
            raise InputError(f"--tau {c}={t:g}: τ is a violation rate in [0, 1]")


def replayed_betas(frame: pd.DataFrame) -> dict[str, float]:
    """β_c at the replay's last step (what the Tune view's Apply sets)."""
    if frame.empty:
        return {}
    last = frame[frame["step"] == frame["step"].max()]
    return {str(r.channel): float(r.beta) for r in last.itertuples(index=False)}


def run_effect(
    handle: StoreHandle,
    run: str,
    estimator: str = "grpo",
    config: tuple = (),
    channel: str | None = None,
    after: dict[str, float] | None = None,
    normalizations: dict[str, str] | None = None,
) -> pd.DataFrame:
    """Rows EFFECT_COLUMNS: per step (and `step` None: the whole run), `which` before (the default β) or
    after (`after` over the defaults), `kind` channel (share of Σ_c |β_c Ã_c|) or class (share of
    Σ|A_final|, `token_share` its share of trained tokens); `abs` is the sum the share is taken of.
    Each estimator channel is computed at its scope through the store's cache (`creditlens estimate`)."""
    channel = main_channel.resolve(handle, run, channel)
    with handle.read() as store:
        steps = sorted(int(s) for s in store.rollout_keys(run)["step"].unique())
        classes = credit_summary.credit_classes(store, run)
        definitions = credit_summary.run_classes(store, run)
    scoped: dict[str, estimates.ScopedEstimate] = {}
    rows = []
    for step in steps:
        with handle.read() as store:
            batch = store.load_batch(run, steps=[step])
        specs = channel_credit.channel_specs(batch, estimator, config, None, normalizations, channel)
        unknown = sorted(set(after or {}) - set(specs))
        if unknown:
            raise InputError(f"--beta {unknown[0]}: the channels with a β on {channel} are {sorted(specs)}")
        ids = batch.rollout_ids.tolist()
        projected = {}
        for name, spec in specs.items():
            if spec.projection == "estimator":
                if name not in scoped:  # the whole run once, at the estimator's scope (cached)
                    cfg = channels.estimator_config(spec)
                    scoped[name] = estimates.estimate_rollouts(handle, run, spec.estimator, cfg)
                projected[name] = scoped[name].padded(ids, batch.T)
        credit = channel_credit.channel_credit(
            batch, estimator, config, None, projected, normalizations, channel
        )
        mask = batch.trained().response_mask.cpu().numpy().astype(bool)  # (B, T)
        ids_of_class = credit_summary.class_ids(batch, classes, definitions)[mask]  # (N,)
        tokens = np.bincount(ids_of_class + 1, minlength=len(classes) + 1)[1:]  # -1: a class not listed
        for which, betas in (("before", credit.betas), ("after", {**credit.betas, **(after or {})})):
            final = np.zeros(mask.shape)
            for c, tilde in credit.per_channel.items():
                part = betas[c] * tilde.astype(np.float64)  # (B, T) β_c Ã_c
                final += part
                rows.append((step, which, "channel", c, float(np.abs(part[mask]).sum()), math.nan))
            weight = np.bincount(ids_of_class + 1, np.abs(final[mask]), minlength=len(classes) + 1)[1:]
            for k, name in enumerate(classes):
                rows.append((step, which, "class", name, float(weight[k]), float(tokens[k])))
    frame = pd.DataFrame(rows, columns=["step", "which", "kind", "name", "abs", "tokens"])
    whole = frame.groupby(["which", "kind", "name"], sort=False, as_index=False)[["abs", "tokens"]].sum()
    whole.insert(0, "step", None)
    frame = pd.concat([frame, whole], ignore_index=True)
    by = [frame["step"].fillna(-math.inf), frame["which"], frame["kind"]]
    total = frame.groupby(by)["abs"].transform("sum")
    frame["share"] = np.where(total > 0, frame["abs"] / total.where(total > 0, 1.0), math.nan)
    n_tokens = frame.groupby(by)["tokens"].transform("sum")
    frame["token_share"] = np.where(
        frame["kind"] == "class", frame["tokens"] / n_tokens.where(n_tokens > 0, 1.0), math.nan
    )
    return frame[EFFECT_COLUMNS]


@dataclass
class Tuning:
    """Everything `creditlens tune` prints and the Tune view draws."""

    run: str
    estimator: str
    channel: str
    eta: float
    mode: str
    thresholds: dict[str, Threshold]
    tau: dict[str, float]
    beta_default: dict[str, float]
    beta_start: dict[str, float]
    beta_replayed: dict[str, float]
    effect_of: str
    beta_after: dict[str, float]
    replay: pd.DataFrame
    effect: pd.DataFrame | None = None
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {
            "run": self.run,
            "estimator": self.estimator,
            "channel": self.channel,
            "eta": self.eta,
            "mode": self.mode,
            "thresholds": {c: vars(t) for c, t in self.thresholds.items()},
            "tau": self.tau,
            "beta": {
                "default": self.beta_default,
                "start": self.beta_start,
                "replayed": self.beta_replayed,
                "after": self.beta_after,
            },
            "effect_of": self.effect_of,
            "replay": _records(self.replay),
            "effect": None if self.effect is None else _effect_json(self.effect),
            "notes": self.notes,
        }


def tune(
    handle: StoreHandle,
    run: str,
    estimator: str = "grpo",
    config: tuple = (),
    channel: str | None = None,
    beta: dict[str, float] | None = None,
    tau: dict[str, float] | None = None,
    violation: dict[str, float] | None = None,
    eta: float = DEFAULT_ETA,
    mode: str = "projected",
    effect_of: str = "replay",
    effect: bool = True,
) -> Tuning:
    """The replay from β (`beta` over the defaults) with τ (`tau`, DEFAULT_TAU for every constrained
    channel not given) and thresholds (`violation` over the defaults), and the run-level effect of the
    replayed β at the last step (`effect_of` replay) or of `beta` itself (`effect_of` beta)."""
    channel = main_channel.resolve(handle, run, channel)
    defaults = default_betas(handle, run, channel)
    unknown = sorted(set(beta or {}) - set(defaults))
    if unknown:
        raise InputError(f"--beta {unknown[0]}: the channels with a β on {channel} are {sorted(defaults)}")
    allowed = constrained(handle, run, channel)
    bad = sorted(set(tau or {}) - set(allowed))
    if bad:
        where = (
            f"on {channel} the channels with a β to move are {allowed}"
            if allowed
            else (f"on {channel} the channel scores are summed and share one β: pick one channel (--channel)")
        )
        raise InputError(f"--tau {bad[0]}: {where}")
    if effect_of not in ("replay", "beta"):
        raise InputError(f"--effect-of {effect_of!r}: use replay or beta")
    start = {**defaults, **(beta or {})}
    taus = {**dict(tau or {}), **{c: DEFAULT_TAU for c in allowed if c not in (tau or {})}}
    limits = thresholds(handle, run, violation)
    frame = replay(handle, run, taus, eta, start, mode, {c: t.value for c, t in limits.items()})
    replayed = replayed_betas(frame)
    after = {**start, **replayed} if effect_of == "replay" else start
    notes = []
    if not allowed:
        notes.append(
            f"no channel to constrain on {channel}: "
            + (
                "the channel scores are summed and share one β; pick one channel (--channel) to weigh the "
                "others separately"
                if channel == ALL_CHANNELS
                else "the run has no other scored channel"
            )
        )
    result = Tuning(
        run,
        estimator,
        channel,
        float(eta),
        mode,
        limits,
        taus,
        defaults,
        start,
        replayed,
        effect_of,
        after,
        frame,
        notes=notes,
    )
    if effect:
        result.effect = run_effect(handle, run, estimator, config, channel, after)
    return result


def _records(frame: pd.DataFrame) -> list[dict]:
    return [{k: _plain(v) for k, v in row.items()} for row in frame.to_dict(orient="records")]


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return None if not math.isfinite(value) else float(value)
    return value


def _effect_json(frame: pd.DataFrame) -> dict:
    """{run: {before|after: {channels: {c: share}, classes: {k: {share, token_share}}}}, steps: [rows]}."""

    def nested(part: pd.DataFrame) -> dict:
        out: dict = {}
        for which, rows in part.groupby("which", sort=False):
            out[which] = {
                "channels": {r.name: _plain(r.share) for r in rows[rows.kind == "channel"].itertuples()},
                "classes": {
                    r.name: {"share": _plain(r.share), "token_share": _plain(r.token_share)}
                    for r in rows[rows.kind == "class"].itertuples()
                },
            }
        return out

    whole = frame[frame["step"].isna()]
    steps = frame[frame["step"].notna()]
    return {
        "run": nested(whole),
        "steps": [{"step": int(s), **nested(part)} for s, part in steps.groupby("step", sort=True)],
    }
