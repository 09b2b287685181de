"""Queries that (re)write one reward channel of a stored run (`creditlens verify-steps`).

Kept in its own module, like `model_queries`, so the rewards area adds SQL without touching `db.py`;
parameterized only.
"""

from __future__ import annotations

import pandas as pd
import pyarrow as pa

from backend.store.db import Store
from backend.store.explorer_queries import fill_rollout_summary


def step_inputs(store: Store, run: str) -> pd.DataFrame:
    """What a step verifier reads, one row per rollout of `run` in rollout order: rollout_id, prompt,
    response, tokens (NULL when the run has no token text), ground_truth (the group's, or NULL)."""
    run_id = store.run_id(run)
    return store.con.execute(
        "SELECT o.rollout_id, o.prompt, o.response, o.tokens, g.ground_truth FROM rollouts o "
        "LEFT JOIN groups g ON g.run_id = o.run_id AND g.group_id = o.group_id "
        "WHERE o.run_id = ? ORDER BY o.rollout_id",
        [run_id],
    ).df()


def replace_channel(
    store: Store,
    run: str,
    channel: str,
    scores: dict[int, float],
    token_rewards: dict[int, list[float]] | None = None,
) -> int:
    """Set channel `channel` of `run` to these sequence scores (and token rewards), in one transaction.

    Rows of that channel the run had before are replaced; rollouts not in `scores` get none. The
    run's cached estimates and summaries are dropped (a new channel changes "all channels" and the
    summed reward), and the Explorer's per-rollout summary is rebuilt. Returns the rollouts scored.
    """
    run_id = store.run_id(run)
    ids = sorted(int(r) for r in scores)
    score_rows = pa.table(
        {
            "run_id": pa.array([run_id] * len(ids), pa.int32()),
            "rollout_id": pa.array(ids, pa.int32()),
            "channel": pa.array([channel] * len(ids), pa.string()),
            "score": pa.array([float(scores[r]) for r in ids], pa.float64()),
        }
    )
    local = sorted(int(r) for r in (token_rewards or {}))
    reward_rows = pa.table(
        {
            "run_id": pa.array([run_id] * len(local), pa.int32()),
            "rollout_id": pa.array(local, pa.int32()),
            "channel": pa.array([channel] * len(local), pa.string()),
            "rewards": pa.array([list(map(float, token_rewards[r])) for r in local], pa.list_(pa.float32())),
        }
    )
    with store.transaction() as con:
        for table in ("scores", "token_rewards"):
            con.execute(f"DELETE FROM {table} WHERE run_id = ? AND channel = ?", [run_id, channel])
        store.insert_arrow("scores", score_rows)
        store.insert_arrow("token_rewards", reward_rows)
        store._drop_cached_estimates(run_id)
        fill_rollout_summary(store, run_id)
    return len(ids)
