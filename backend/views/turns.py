"""Agent runs turn by turn: the credit share of each assistant turn index per step (the Trends
view's chart, `creditlens turns`) and one group's responses turn by turn (the Group view's aligned turns,
`creditlens turns --group G`). Both read the final advantage A_final (every channel combined, the
estimator on the run's main channel), the credit the Rollout and Group views colour, and count trained
tokens only: a tool's or environment's turn is listed with its tokens and `trained` false, never credited.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from backend.core.batch import RolloutBatch
from backend.core.turns import POLICY_ROLE
from backend.store import StoreHandle
from backend.store import explorer_queries as queries
from backend.views import explain

TURN_SHARE_COLUMNS = ["step", "turn", "rollouts", "tokens", "abs_credit", "share", "mean_advantage"]
GROUP_TURN_COLUMNS = [
    "rollout_id",
    "turn",
    "assistant_turn",
    "role",
    "start",
    "end",
    "tokens",
    "trained",
    "mean_advantage",
    "abs_share",
    "text",
]


def _turns_of(batch: RolloutBatch, row: int) -> list[tuple[str, int, int]]:
    """Row `row`'s turns; a response without any is one assistant turn over its real tokens."""
    turns = batch.turns[row] if batch.turns is not None else []
    return list(turns) or [(POLICY_ROLE, 0, int(batch.lengths[row]))]


def _groups(handle: StoreHandle, run: str) -> list[int]:
    with handle.read() as store:
        return sorted({int(g) for g in store.load_batch(run, fields=()).group_ids.tolist()})


def group_turns(
    handle: StoreHandle, run: str, group: int, estimator: str = "grpo", config: tuple = ()
) -> pd.DataFrame:
    """One row per turn of each response of `group`, in order: rollout_id, turn (1-based, every role),
    assistant_turn (1-based among the policy's turns; NaN for others), role, start, end (token span, end
    exclusive), tokens, trained (any of its tokens trained), mean_advantage (mean A_final over its trained
    tokens; NaN when none), abs_share (its share of the response's Σ|A_final|), text (the turn's token text,
    untrusted: escape it)."""
    batch, credit = explain.group_channel_credit(handle, run, group, estimator, config, save=False)
    final = np.asarray(credit.final)  # (B, T)
    trained = batch.trained_mask.cpu().numpy()  # (B, T)
    rows = []
    for i, rid in enumerate(batch.rollout_ids.tolist()):
        total = float(np.abs(final[i][trained[i]]).sum())
        k = 0
        for n, (role, start, end) in enumerate(_turns_of(batch, i), 1):
            on = trained[i, start:end]
            values = final[i, start:end][on]
            k += role == POLICY_ROLE
            text = "".join(batch.tokens[i][start:end]) if batch.tokens is not None else ""
            rows.append(
                {
                    "rollout_id": int(rid),
                    "turn": n,
                    "assistant_turn": k if role == POLICY_ROLE else np.nan,
                    "role": role,
                    "start": int(start),
                    "end": int(end),
                    "tokens": int(end - start),
                    "trained": bool(on.any()),
                    "mean_advantage": float(values.mean()) if len(values) else np.nan,
                    "abs_share": float(np.abs(values).sum()) / total if total > 0 and len(values) else np.nan,
                    "text": text,
                }
            )
    return pd.DataFrame(rows, columns=GROUP_TURN_COLUMNS)


def turn_shares(
    handle: StoreHandle, run: str, estimator: str | None = "grpo", config: tuple = ()
) -> pd.DataFrame:
    """One row per step and assistant turn index (1-based): rollouts with such a turn, its trained tokens,
    abs_credit = Σ|A_final| over them, share = abs_credit over the step's Σ|A_final| (the shares of a step
    sum to 1), mean_advantage per trained token. Group by group, through the same credit as the Group view
    (so `creditlens turns` and the views agree). No rows for a run without turns (not an agent run)."""
    with handle.read() as store:
        if not queries.has_turns(store, store.run_id(run)):
            return pd.DataFrame(columns=TURN_SHARE_COLUMNS)
    totals: dict[tuple[int, int], list[float]] = {}
    for group in _groups(handle, run):
        batch, credit = explain.group_channel_credit(handle, run, group, estimator, config, save=False)
        final = np.asarray(credit.final)
        trained = batch.trained_mask.cpu().numpy()
        for i, step in enumerate(batch.steps.tolist()):
            spans = [(s, e) for role, s, e in _turns_of(batch, i) if role == POLICY_ROLE]
            for k, (start, end) in enumerate(spans, 1):
                values = final[i, start:end][trained[i, start:end]]
                entry = totals.setdefault((int(step), k), [0, 0, 0.0, 0.0])
                entry[0] += 1
                entry[1] += len(values)
                entry[2] += float(np.abs(values).sum())
                entry[3] += float(values.sum())
    frame = pd.DataFrame(
        [(s, k, n, t, a, m) for (s, k), (n, t, a, m) in sorted(totals.items())],
        columns=["step", "turn", "rollouts", "tokens", "abs_credit", "summed"],
    )
    step_total = frame.groupby("step")["abs_credit"].transform("sum")
    frame["share"] = frame["abs_credit"] / step_total.where(step_total > 0)
    frame["mean_advantage"] = frame["summed"] / frame["tokens"].where(frame["tokens"] > 0)
    return frame[TURN_SHARE_COLUMNS]
