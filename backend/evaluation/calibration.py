"""Is the Monte Carlo teacher the policy that sampled the run? Per step, the mean value of the empty prefix
V̂(∅) against the step's observed accuracy (`creditlens teacher-bench`'s calibration table).

V̂(∅) of a rollout estimates the success rate of the model that drew the suffixes on that prompt; over the
rollouts of a step its mean estimates the step's accuracy when that model is the one that sampled the
step. A gap beyond the stderrs says the teacher valued another policy (an off-policy teacher: the
`on_policy` column says what the suffixes record).

Columns: step; v_empty, v_empty_se (mean V̂(∅) over the step's valued rollouts, stderr over rollouts);
accuracy, accuracy_se (mean outcome on the outcome channel over the same rollouts); n (those rollouts);
step_accuracy, step_n (over every rollout of the step); on_policy (the share of those rollouts whose
V̂(∅) suffixes all came from the step's checkpoint; None where any origin is unknown); policy (that share
in words: on-policy, off-policy, "40% on-policy" or unknown).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from backend.store.checkpoint_queries import empty_prefix_values

COLUMNS = (
    "step",
    "v_empty",
    "v_empty_se",
    "accuracy",
    "accuracy_se",
    "n",
    "step_accuracy",
    "step_n",
    "on_policy",
    "policy",
)


def _mean_se(x: np.ndarray) -> tuple[float, float]:
    if len(x) == 0:
        return math.nan, math.nan
    return float(x.mean()), float(x.std(ddof=1) / math.sqrt(len(x))) if len(x) > 1 else math.nan


def calibration(store, run: str, outcomes: dict[int, float]) -> pd.DataFrame:
    """The calibration table of `run` (store: an open `Store`); `outcomes`: rollout id -> the outcome the
    teacher-bench reads (the run's main channel by default). Empty when no rollout has a value at 0."""
    values = empty_prefix_values(store, run)
    keys = store.rollout_keys(run)
    rows = []
    for step, part in values.groupby("step", sort=True):
        outcome = np.array([outcomes[int(r)] for r in part["rollout_id"]], dtype=np.float64)
        everyone = np.array(
            [outcomes[int(r)] for r in keys.loc[keys["step"] == step, "rollout_id"] if int(r) in outcomes],
            dtype=np.float64,
        )
        v, v_se = _mean_se(part["value"].to_numpy(np.float64))
        acc, acc_se = _mean_se(outcome)
        flags = part["on_policy"]  # DuckDB's NULL arrives as NA or None: `notna` reads both
        on_policy = float(flags.astype(float).mean()) if flags.notna().all() else None
        rows.append(
            {
                "step": int(step),
                "v_empty": v,
                "v_empty_se": v_se,
                "accuracy": acc,
                "accuracy_se": acc_se,
                "n": len(part),
                "step_accuracy": float(everyone.mean()),
                "step_n": len(everyone),
                "on_policy": on_policy,
                "policy": policy_label(on_policy),
            }
        )
    return pd.DataFrame(rows, columns=list(COLUMNS))


def policy_label(on_policy) -> str:
    """How a step's V̂(∅) suffixes were drawn: on-policy, off-policy, a share, or unknown (None/NaN)."""
    if on_policy is None or on_policy != on_policy:
        return "unknown"
    if on_policy >= 1:
        return "on-policy"
    return "off-policy" if on_policy <= 0 else f"{on_policy:.0%} on-policy"


def off_policy_note(table: pd.DataFrame) -> str | None:
    """The warning above every teacher-bench table (command line and Oracle view) when some valued rollouts
    were valued by another model than the checkpoint that sampled them, or by an unknown one; None when all
    are on-policy (or nothing is valued)."""
    if table.empty:
        return None
    if table["on_policy"].isna().any():
        return "teacher origin unknown for some steps (suffixes stored without it): see the calibration table"
    off = (table["n"] * (1 - table["on_policy"].astype(float))).round().astype(int)
    if not (off > 0).any():
        return None
    steps = ", ".join(map(str, table["step"][off > 0]))
    return (
        f"off-policy teacher: {off.sum()} of {table['n'].sum()} valued rollouts were valued by another "
        f"model than the checkpoint that sampled them (steps {steps}); their numbers rank estimators "
        "against another policy's values: see the calibration table"
    )
