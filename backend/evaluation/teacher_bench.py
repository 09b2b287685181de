"""Every estimator ranked against the Monte Carlo teacher of a real run (`creditlens teacher-bench`,
the Oracle view's teacher table).

The teacher (docs/estimators.md section 5): a rollout with valued positions p_0 < ... < p_{n-1} has n
segments [p_k, p_{k+1}) (p_n = L, the last segment ends at the observed outcome V̂(p_n) = R) with MC
advantage Δ_k = V̂(p_{k+1}) − V̂(p_k) and stderr sqrt(se_k² + se_{k+1}²). An estimator's prediction
for segment k is its advantage summed over the segment's tokens, S_k. Tokens before p_0 are not judged.

The metrics are defined in `backend.evaluation.teacher_segments`.
Sanity rows: `chance` (what a random predictor scores), and the best estimator inverted (−A, must fall
below chance) and shuffled (its segment sums permuted within each rollout, layout kept, averaged over
SHUFFLES permutations: chance by construction on the within-rollout rankings; its spearman and
sign_accuracy are what the rollout's level alone, e.g. its outcome, earns).
Estimators that read the teacher's own values (suffix_mc, gae with value_source=mc) are listed as
kind `uses teacher` and never chosen as best; with a process channel, the step verifier's own token
rewards are a row of kind `uses verifier`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import torch

from backend.core.batch import BatchError
from backend.core.errors import InputError
from backend.credit import estimates, main_channel
from backend.estimators import functional as F
from backend.estimators import registry
from backend.evaluation import bench_stats as stats
from backend.evaluation import cliff_tokens
from backend.evaluation import fair_metrics as fair
from backend.evaluation import first_wrong_step as fws
from backend.evaluation.calibration import calibration, off_policy_note
from backend.evaluation.teacher_segments import (
    DEFINITIONS,
    METRICS,
    PER_ROLLOUT,
    RANKED_METRICS,
    VALUE_METRICS,
    chance_row,
    score_advantages,
    segment_sums,
    teacher_segments,
)

__all__ = [
    "DEFINITIONS",
    "METRICS",
    "PER_ROLLOUT",
    "RANKED_METRICS",
    "VALUE_METRICS",
    "TeacherBench",
    "teacher_bench",
]

VALUE_SOURCES = ("zero", "stored", "fitted", "prefix_tree")
MIN_POSITIONS = 200
"""Fewer valued positions than this: the view warns that the table is noise."""
SHUFFLES = 8
"""The shuffled sanity row: metrics averaged over this many permutations (each metric's `_se`: theirs)."""


def parse_estimator_specs(items: list[str] | None) -> list[tuple[str, str, dict]]:
    """[(label, name, overrides)]: "name" or "name:key=value,key=value"; default every registered name."""
    if not items:
        return [(n, n, {}) for n in registry.names()]
    out = []
    for item in items:
        name, _, rest = item.partition(":")
        overrides = {}
        for pair in filter(None, rest.split(",")):
            key, eq, value = pair.partition("=")
            if not eq:
                raise InputError(f"--estimators {item!r}: expected name:key=value,key=value")
            overrides[key.strip()] = value.strip()
        try:
            registry.make_config(name, **overrides)
        except (KeyError, ValueError, TypeError) as exc:
            raise InputError(f"--estimators {item!r}: {exc}") from None
        out.append((item, name, overrides))
    return out


def uses_teacher(name: str, config: Any) -> bool:
    return any(n in registry.MC_NEEDS for n in registry.get(name).needs) or (
        getattr(config, "value_source", None) == "mc"
    )


@dataclass
class TeacherBench:
    table: pd.DataFrame
    """estimator, kind, one column per metric and its `_se`, n_positions, n_rollouts."""
    per_rollout: pd.DataFrame
    """estimator, rollout_id, ranking_accuracy, sign_accuracy, critical_hit1, critical_hit3, segments,
    first_wrong_hit1."""
    n_positions: int
    n_rollouts: int
    n_segments: int
    skipped: list[str] = field(default_factory=list)
    n_first_wrong: int = 0
    """valued rollouts judged by first_wrong_hit1 (failed, with a wrong step in the process channel)."""
    n_cliffs: int = 0
    """valued rollouts judged by cliff_hit1 (with a cliff token)."""
    calibration: pd.DataFrame = field(default_factory=pd.DataFrame)
    """Per step: mean V̂(∅) vs the observed accuracy (`backend.evaluation.calibration`)."""

    def to_json(self) -> dict:
        def clean(records):
            return [
                {k: (None if isinstance(v, float) and v != v else v) for k, v in r.items()} for r in records
            ]

        return {
            "n_positions": self.n_positions,
            "n_rollouts": self.n_rollouts,
            "n_segments": self.n_segments,
            "n_first_wrong": self.n_first_wrong,
            "n_cliffs": self.n_cliffs,
            "definitions": DEFINITIONS,
            "rows": clean(self.table.to_dict("records")),
            "calibration": clean(self.calibration.to_dict("records")),
            "skipped": self.skipped,
        }

    def off_policy_note(self) -> str | None:
        """The off-policy warning for this teacher (`backend.evaluation.calibration.off_policy_note`), or
        None."""
        return off_policy_note(self.calibration)

    def misses(self, estimator: str, metric: str) -> pd.DataFrame:
        """The rollouts where `estimator` misses on `metric` (below 1, a miss first), worst first."""
        part = self.per_rollout[self.per_rollout["estimator"] == estimator]
        part = part[part[metric].notna() & (part[metric] < 1)]
        return part.sort_values([metric, "rollout_id"])[["rollout_id", metric, "segments"]]


def teacher_bench(
    handle,
    run: str,
    specs: list[tuple[str, str, dict]] | None = None,
    outcome_channel: str | None = None,
    steps: list[int] | None = None,
) -> TeacherBench:
    """Rank estimators (default: every registered one) against the stored teacher values of `run`, the
    estimators and the last segment's outcome on `outcome_channel` (default: the run's main channel).
    `steps`: judge only the valued rollouts of these training steps (say, those whose teacher is on-policy);
    the estimates are the same (each computed on its scope's batch).

    Advantages come from `estimates.estimate_rollouts` at each estimator's scope, through the store's
    cache: the numbers `creditlens estimate` prints. Raises `InputError` when the run has no values.
    """
    specs = specs if specs is not None else parse_estimator_specs(None)
    values = _teacher_values(handle, run, steps)
    outcome_channel = main_channel.resolve(handle, run, outcome_channel)
    with handle.read() as store:
        batch = estimates.with_channel(store.load_batch(run), outcome_channel)
    ids = batch.rollout_ids.tolist()
    lengths = dict(zip(ids, batch.lengths.tolist(), strict=True))
    outcomes = dict(zip(ids, batch.scores[outcome_channel].to(torch.float64).tolist(), strict=True))
    group_of = dict(zip(ids, batch.group_ids.tolist(), strict=True))
    masks = None if batch.loss_mask is None else batch.loss_mask.cpu().numpy()  # (B, T) bool
    loss_masks = None if masks is None else {r: masks[i, : lengths[r]] for i, r in enumerate(ids)}
    segments = teacher_segments(values, lengths, outcomes, group_of, loss_masks)
    with handle.read() as store:
        table_of_steps = calibration(store, run, outcomes)
    if steps is not None:
        table_of_steps = table_of_steps[table_of_steps["step"].isin(steps)].reset_index(drop=True)
    valued = sorted({int(r) for r in segments.rollout})
    truth = fws.step_truth(batch, outcome_channel)
    cliffs = cliff_tokens.cliff_truth(values, lengths) if "n" in values.columns else None
    rows, per_frames, skipped = [], [], []
    advantages_of: dict[str, dict[int, np.ndarray]] = {}
    for label, name, overrides in specs:
        config = registry.make_config(name, **dict(main_channel.on_channel(name, overrides, outcome_channel)))
        try:
            scoped = estimates.estimate_rollouts(handle, run, name, config, valued)
        except (BatchError, InputError, ValueError, RuntimeError) as exc:
            skipped.append(f"{label}: {str(exc).splitlines()[0]}")
            continue
        metrics, per = score_advantages(segments, truth, scoped.advantages, cliffs)
        kind = "uses teacher" if uses_teacher(name, config) else "estimator"
        rows.append({"estimator": label, "kind": kind, **metrics})
        per_frames.append(per.assign(estimator=label))
        if kind == "estimator":
            advantages_of[label] = scoped.advantages
    table = pd.DataFrame(rows)
    if truth.first_wrong:  # the step verifier's own credit: its scores at the step ends
        rows.append(_verifier_row(batch, lengths, valued, segments, truth, cliffs))
    rows = [*rows, *value_source_rows(batch, values, outcome_channel, skipped)]
    chance = {"estimator": "chance", "kind": "sanity", **chance_row(segments, truth, cliffs)}
    rows.append(chance)
    rows += _best_inverted_and_shuffled(table, advantages_of, segments, truth, cliffs)
    columns = ["estimator", "kind"] + [c for m in METRICS for c in (m, f"{m}_se", f"{m}_se_group")]
    out = pd.DataFrame(rows).reindex(columns=columns)
    out["n_positions"] = segments.n_positions
    out["n_rollouts"] = len(valued)
    per_rollout = (
        pd.concat(per_frames, ignore_index=True)
        if per_frames
        else pd.DataFrame(columns=["estimator", "rollout_id"])
    )
    judged = sum(r in truth.first_wrong for r in valued)
    n_cliffs = 0 if cliffs is None else sum(r in cliffs.cliffs for r in valued)
    return TeacherBench(
        out,
        per_rollout,
        segments.n_positions,
        len(valued),
        len(segments.rollout),
        skipped,
        judged,
        n_cliffs,
        table_of_steps,
    )


def _teacher_values(handle, run: str, steps: list[int] | None) -> pd.DataFrame:
    """The run's stored Monte Carlo values (of the rollouts of `steps` when given); raises `InputError`
    when there are none."""
    with handle.read() as store:
        values, keys = store.resample_values(run), store.rollout_keys(run)
    if steps is not None:
        values = values[values["rollout_id"].isin(keys.loc[keys["step"].isin(steps), "rollout_id"])]
    if values.empty:
        at = "" if steps is None else f" at steps {sorted(steps)}"
        raise InputError(
            f"run {run!r} has no Monte Carlo values{at}; run `creditlens teacher --run {run}` first"
        )
    return values


def _verifier_row(batch, lengths: dict, valued: list[int], segments, truth, cliffs) -> dict:
    """The row of the step verifier's own credit: the process channel's token rewards (its scores at the
    step ends) judged as an estimator's advantages."""
    local = batch.token_rewards["process"].cpu().numpy()
    row_of = {int(r): i for i, r in enumerate(batch.rollout_ids.tolist())}
    own = {r: local[row_of[r], : lengths[r]] for r in valued}
    return {
        "estimator": "process channel",
        "kind": "uses verifier",
        **score_advantages(segments, truth, own, cliffs)[0],
    }


def _best_inverted_and_shuffled(
    table: pd.DataFrame, advantages_of: dict[str, dict[int, np.ndarray]], segments, truth, cliffs
) -> list[dict]:
    """The sanity rows of the best estimator (by ranking accuracy): its advantages inverted, and its
    segment sums shuffled within each rollout (averaged over SHUFFLES draws); none without an estimator."""
    if not (len(table) and (table["kind"] == "estimator").any()):
        return []
    best = table[table["kind"] == "estimator"].sort_values("ranking_accuracy", ascending=False).iloc[0]
    adv = advantages_of[best["estimator"]]
    inverted, _ = score_advantages(segments, truth, {r: -a for r, a in adv.items()}, cliffs)
    sums = segment_sums(segments, adv)
    # one draw is noisy (a rollout of 3 segments has 6 orders): the row averages SHUFFLES of them
    shuffled = (
        pd.DataFrame(
            [
                score_advantages(
                    segments,
                    truth,
                    fair.segment_shuffle(segments.rollout, segments.start, segments.end, sums, adv, seed),
                    cliffs,
                )[0]
                for seed in range(SHUFFLES)
            ]
        )
        .mean()
        .to_dict()
    )
    return [
        {"estimator": f"{best['estimator']} ({suffix})", "kind": "sanity", **metrics}
        for suffix, metrics in (("inverted", inverted), ("shuffled", shuffled))
    ]


def value_source_rows(batch, values: pd.DataFrame, outcome_channel: str, skipped: list[str]) -> list[dict]:
    """value_mse and value_corr of gae's value sources against V̂ in Z units, one row per source; `batch`
    is the whole run."""
    R = batch.scores[outcome_channel].to(torch.float32)
    center, scale = F.outcome_center_scale(R, batch.group_ids, "grpo", 1e-6)
    row_of = {int(r): i for i, r in enumerate(batch.rollout_ids.tolist())}
    lengths = batch.lengths.tolist()
    keep = [
        (row_of[int(r)], int(p), float(v))
        for r, p, v in zip(values["rollout_id"], values["pos"], values["value"], strict=True)
        if int(r) in row_of and 0 <= int(p) < lengths[row_of[int(r)]]
    ]
    if not keep:
        return []
    rows_i = np.array([k[0] for k in keep])
    pos = np.array([k[1] for k in keep])
    target = scale[rows_i].numpy() * (np.array([k[2] for k in keep]) - center[rows_i].numpy())
    blocks = stats.consecutive_blocks(rows_i)
    group_of_row = dict(enumerate(batch.group_ids.tolist()))
    groups = stats.group_blocks(rows_i, group_of_row)
    out = []
    for source in VALUE_SOURCES:
        try:
            result = registry.estimate("gae", batch, value_source=source, channel=outcome_channel)
        except (BatchError, InputError, ValueError, RuntimeError) as exc:
            skipped.append(f"V: {source}: {str(exc).splitlines()[0]}")
            continue
        v = result.diagnostics["values"][rows_i, pos].numpy().astype(np.float64)
        per_rollout = [float(np.mean((v[b] - target[b]) ** 2)) for b in blocks]
        mse, mse_se = stats.mean_se(per_rollout)

        def corr(idx, v=v):
            if np.std(v[idx]) < 1e-12 or np.std(target[idx]) < 1e-12:
                return math.nan
            return float(np.corrcoef(v[idx], target[idx])[0, 1])

        everything = np.arange(len(v))
        out.append(
            {
                "estimator": f"V: {source}",
                "kind": "value source",
                "value_mse": mse,
                "value_mse_se": mse_se,
                "value_mse_se_group": stats.group_mean_se(
                    per_rollout, [rows_i[b[0]] for b in blocks], group_of_row
                ),
                "value_corr": corr(everything),
                "value_corr_se": stats.bootstrap_se(corr, blocks),
                "value_corr_se_group": stats.bootstrap_se(corr, groups),
            }
        )
    return out
