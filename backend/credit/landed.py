"""Did the credit land: per trained token the realized change of its log-probability after the update that
consumed its step, Δ_t = log π_after(y_t) − log π_before(y_t), beside its credit, and how well the credit
describes it.

`log π_before` is the rollout's `logprobs` (the sampling weights', as recorded). `log π_after` comes from one
of two routes, which agree on the same run (tests/backend/credit/test_landed.py):

- `recorded`: the TRL recorder scored the batch again once its update was done (the native field
  `logprobs_after`, the token feature of that name);
- `checkpoints`: `creditlens landed` scored the step's rollouts with the checkpoint the run names for the
  policy after the step's update (`backend.models.landed_scoring`, cached in table `landed_logprobs`).

This module only reads the store: it never runs a model (the views call it). Every table a view shows is one
function here that the command (`creditlens landed`) and the Python API (`Run.landed`) call too:
`by_step`, `by_rollout`, `by_class`, `by_estimator`. "credit" is the run's as-trained credit by default
(`as_trained.default_estimator`: the trainer's own truth first).

Agreement is measured over the trained tokens whose Δ is known: Spearman(credit, Δ) (NaN where either is
constant: GRPO's credit is constant within a rollout, so a rollout's own Spearman is NaN under it) and sign
agreement, the share of tokens with non-zero credit whose Δ has the credit's sign.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd
import torch

from backend.core.errors import InputError
from backend.core.ranks import spearman
from backend.credit import as_trained, token_rows
from backend.store import StoreHandle
from backend.store.landed_queries import REALIZED_ROW, cached_after, recorded_after

__all__ = ["REALIZED_ROW", "SOURCES", "by_class", "by_estimator", "by_rollout", "by_step", "landed_tokens"]

SOURCES = ("auto", "recorded", "checkpoints")
"""Where log π_after comes from: the recorder's `logprobs_after`, the checkpoint route's cache, or `auto`
(the recorded values where the run has them, else the cache)."""
TOKEN_COLUMNS = [
    "rollout_id",
    "step",
    "group_id",
    "pos",
    "token",
    "token_class",
    "credit",
    "logprob",
    "logprob_after",
    "delta",
    "trained",
    "dropped",
]
DROPPED_FEATURES = ("is_masked",)
"""Token features that mark a token whose credit the trust region dropped (1: masked out of the loss):
prime-rl's token export, as its importer keeps it. Such a token is left out of the agreement (its credit
never reached the gradient) and counted per step (`dropped`)."""


@dataclass
class LandedTokens:
    """One row per real token of the rollouts whose Δ is known (`TOKEN_COLUMNS`), and how it was made."""

    tokens: pd.DataFrame
    run: str
    estimator: str
    source: str
    """`recorded` or `checkpoints`: the route the after-update logprobs came from."""
    notes: list[str] = field(default_factory=list)

    @property
    def trained(self) -> pd.DataFrame:
        """The trained tokens whose credit reached the update (an untrained tool output or observation got
        no credit; a token the trust region dropped had its credit masked out): the agreement's tokens."""
        return self.tokens[self.tokens["trained"] & ~self.tokens["dropped"]]


def after_logprobs(handle: StoreHandle, run: str, source: str = "auto") -> tuple[dict[int, np.ndarray], str]:
    """(rollout id -> log π_after per response token, the route used). InputError naming what to do when the
    run has none by the asked route."""
    if source not in SOURCES:
        raise InputError(f"--source must be one of {', '.join(SOURCES)}, got {source!r}")
    with handle.read() as store:
        if not store.has_run(run):
            raise InputError(f"no run named {run!r} (see `creditlens runs`)")
        recorded = recorded_after(store, run) if source in ("auto", "recorded") else {}
        cached = cached_after(store, run) if source in ("auto", "checkpoints") and not recorded else {}
    if recorded:
        return recorded, "recorded"
    if cached:
        return {rid: values for rid, (_, values) in cached.items()}, "checkpoints"
    if source == "recorded":
        raise InputError(
            f"run {run!r} has no recorded logprobs_after (the TRL recorder writes them); "
            f"`creditlens landed --run {run} --source checkpoints` scores with the after-update checkpoints"
        )
    raise InputError(
        f"run {run!r} has no realized Δ log π yet: neither the recorder's logprobs_after nor scores under "
        f"the after-update checkpoints; `creditlens landed --run {run}` computes them where the run names "
        "those checkpoints"
    )


def landed_tokens(
    handle: StoreHandle,
    run: str,
    estimator: str | None = None,
    overrides: dict | None = None,
    *,
    source: str = "auto",
    steps: list[int] | None = None,
) -> LandedTokens:
    """The run's tokens with their credit under `estimator` (None: the run's as-trained credit) and their
    realized Δ, for the rollouts of `steps` (None: all) whose after-update logprobs the store holds."""
    after, used = after_logprobs(handle, run, source)
    estimator = estimator or as_trained.default_estimator(handle, run)
    name, config = token_rows.estimate_config(handle, run, estimator, dict(overrides or {}))
    with handle.read() as store:
        rollouts = store.con.execute(
            "SELECT rollout_id, step, logprobs, loss_mask FROM rollouts WHERE run_id = ? ORDER BY rollout_id",
            [store.run_id(run)],
        ).fetchall()
    wanted = None if steps is None else {int(s) for s in steps}
    before, trained_of, step_of = {}, {}, {}
    for rid, step, logprobs, loss_mask in rollouts:
        if int(rid) not in after or (wanted is not None and int(step) not in wanted):
            continue
        if logprobs is None:
            continue  # no log π_before: `creditlens score` fills it
        before[int(rid)] = np.asarray(logprobs, np.float32)
        trained_of[int(rid)] = None if loss_mask is None else np.asarray(loss_mask, bool)
        step_of[int(rid)] = int(step)
    if wanted is not None and not step_of:
        raise InputError(f"run {run!r} has no realized Δ at steps {', '.join(map(str, sorted(wanted)))}")
    with handle.read() as store:
        masked = store.con.execute(
            "SELECT rollout_id, vals FROM token_features WHERE run_id = ? AND list_contains(?, name)",
            [store.run_id(run), list(DROPPED_FEATURES)],
        ).fetchall()
    dropped_of: dict[int, np.ndarray] = {}
    for rid, vals in masked:  # any of the features marks the token
        flags = np.asarray(vals, np.float64) > 0.5
        dropped_of[int(rid)] = flags | dropped_of.get(int(rid), np.zeros_like(flags))
    parts = []
    for table in token_rows.token_tables(handle, run, name, config).tables():
        frame = table.to_pandas()
        frame = frame[frame["rollout_id"].isin(before.keys())]
        if not frame.empty:
            parts.append(frame)
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=TOKEN_COLUMNS)
    frame = frame.rename(columns={"advantage": "credit"})
    ids, pos = frame["rollout_id"].to_numpy(np.int64), frame["pos"].to_numpy(np.int64)
    logprob = np.array([before[r][p] for r, p in zip(ids, pos, strict=True)], np.float64)
    logprob_after = np.array([after[r][p] for r, p in zip(ids, pos, strict=True)], np.float64)
    frame["step"] = [step_of[r] for r in ids]
    frame["logprob"] = logprob
    frame["logprob_after"] = logprob_after
    frame["delta"] = logprob_after - logprob
    frame["trained"] = [
        True if trained_of[r] is None else bool(trained_of[r][p]) for r, p in zip(ids, pos, strict=True)
    ]
    frame["dropped"] = [
        bool(dropped_of[r][p]) if r in dropped_of else False for r, p in zip(ids, pos, strict=True)
    ]
    frame["credit"] = frame["credit"].astype(np.float64)
    return LandedTokens(frame[TOKEN_COLUMNS].reset_index(drop=True), run, name, used)


def agreement(credit: np.ndarray, delta: np.ndarray) -> tuple[float, float]:
    """(Spearman(credit, Δ), sign agreement) over tokens: NaN where undefined (a constant side; no token
    with non-zero credit)."""
    credit, delta = np.asarray(credit, np.float64), np.asarray(delta, np.float64)
    rho = spearman(torch.tensor(credit), torch.tensor(delta)) if len(credit) > 1 else math.nan
    signed = credit != 0
    sign = float(np.mean(np.sign(credit[signed]) == np.sign(delta[signed]))) if signed.any() else math.nan
    return rho, sign


def _summary(frame: pd.DataFrame) -> dict:
    rho, sign = agreement(frame["credit"].to_numpy(), frame["delta"].to_numpy())
    credit = frame["credit"].to_numpy()
    delta = frame["delta"].to_numpy()
    return {
        "tokens": len(frame),
        "spearman": rho,
        "sign_agreement": sign,
        "mean_delta": float(delta.mean()) if len(delta) else math.nan,
        "mean_delta_credited": float(delta[credit > 0].mean()) if (credit > 0).any() else math.nan,
        "mean_delta_penalised": float(delta[credit < 0].mean()) if (credit < 0).any() else math.nan,
    }


def by_step(landed: LandedTokens) -> pd.DataFrame:
    """Per step over its trained tokens whose credit reached the update: tokens, spearman, sign_agreement,
    mean_delta, mean_delta_credited (tokens with credit > 0), mean_delta_penalised (credit < 0); and
    dropped, the trained tokens whose credit the trust region dropped (`DROPPED_FEATURES`)."""
    tokens = landed.tokens
    dropped = tokens[tokens["trained"] & tokens["dropped"]].groupby("step").size()
    rows = [
        {"step": int(step), **_summary(part), "dropped": int(dropped.get(step, 0))}
        for step, part in landed.trained.groupby("step", sort=True)
    ]
    return pd.DataFrame(rows, columns=["step", *_SUMMARY, "dropped"])


def by_rollout(landed: LandedTokens) -> pd.DataFrame:
    """Per rollout over its trained tokens: rollout_id, step, tokens, landed_spearman, landed_sign,
    landed_mean_delta (the Explorer's columns)."""
    rows = []
    for rid, part in landed.trained.groupby("rollout_id", sort=True):
        summary = _summary(part)
        rows.append(
            {
                "rollout_id": int(rid),
                "step": int(part["step"].iloc[0]),
                "tokens": summary["tokens"],
                "landed_spearman": summary["spearman"],
                "landed_sign": summary["sign_agreement"],
                "landed_mean_delta": summary["mean_delta"],
            }
        )
    columns = ["rollout_id", "step", "tokens", "landed_spearman", "landed_sign", "landed_mean_delta"]
    return pd.DataFrame(rows, columns=columns)


def by_class(landed: LandedTokens, per_step: bool = False) -> pd.DataFrame:
    """Per token class (and step, `per_step`) over trained tokens: tokens, credit_share (its share of
    Σ|credit| of the run, or of the step), mean_credit, mean_delta. Did the class that got credit rise?"""
    trained = landed.trained.assign(abs_credit=lambda f: f["credit"].abs())
    keys = ["step", "token_class"] if per_step else ["token_class"]
    grouped = trained.groupby(keys, sort=True).agg(
        tokens=("delta", "size"),
        abs_credit=("abs_credit", "sum"),
        mean_credit=("credit", "mean"),
        mean_delta=("delta", "mean"),
    )
    grouped = grouped.reset_index()
    totals = (
        grouped.groupby("step")["abs_credit"].transform("sum") if per_step else grouped["abs_credit"].sum()
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        grouped["credit_share"] = np.where(totals > 0, grouped["abs_credit"] / totals, np.nan)
    return grouped[[*keys, "tokens", "credit_share", "mean_credit", "mean_delta"]]


def by_estimator(
    handle: StoreHandle,
    run: str,
    estimators: list[str],
    *,
    source: str = "auto",
    steps: list[int] | None = None,
) -> pd.DataFrame:
    """Per estimator (its default parameters on the run's main channel; the as-trained one as the trainer
    computed it): how well its credit predicts the realized Δ over all trained tokens (spearman,
    sign_agreement) and the mean of its per-step Spearman (Compare's table)."""
    rows = []
    for name in estimators:
        landed = landed_tokens(handle, run, name, source=source, steps=steps)
        trained = landed.trained
        rho, sign = agreement(trained["credit"].to_numpy(), trained["delta"].to_numpy())
        per_step = by_step(landed)["spearman"].dropna()
        rows.append(
            {
                "estimator": landed.estimator,
                "tokens": len(trained),
                "spearman": rho,
                "sign_agreement": sign,
                "mean_step_spearman": float(per_step.mean()) if len(per_step) else math.nan,
            }
        )
    return pd.DataFrame(
        rows, columns=["estimator", "tokens", "spearman", "sign_agreement", "mean_step_spearman"]
    )


def rollout_delta(handle: StoreHandle, run: str, rollout_id: int, source: str = "auto") -> np.ndarray | None:
    """Δ per response token of one rollout (NaN on untrained tokens), or None when the store holds no
    after-update logprobs for it: the Rollout view's row (the same values as `landed_tokens`' `delta`)."""
    with handle.read() as store:
        after = recorded_after(store, run, rollout_id) if source in ("auto", "recorded") else {}
        if not after and source in ("auto", "checkpoints"):
            after = {r: v for r, (_, v) in cached_after(store, run, rollout_id).items()}
        row = store.con.execute(
            "SELECT logprobs, loss_mask FROM rollouts WHERE run_id = ? AND rollout_id = ?",
            [store.run_id(run), int(rollout_id)],
        ).fetchone()
    if not after or row is None or row[0] is None:
        return None
    delta = after[int(rollout_id)].astype(np.float64) - np.asarray(row[0], np.float64)
    return delta if row[1] is None else np.where(np.asarray(row[1], bool), delta, np.nan)


_SUMMARY = [
    "tokens",
    "spearman",
    "sign_agreement",
    "mean_delta",
    "mean_delta_credited",
    "mean_delta_penalised",
]
