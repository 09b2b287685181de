"""The policy after each step's update and the tokens scored under it (tables `step_after_checkpoints`,
`landed_logprobs`, migration 015), and the recorder's `logprobs_after` (the token feature of that name).

Parameterized SQL only. Folders arrive here absolute (the import resolves them).
"""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa

from backend.store.db import Store

RECORDED_AFTER = "logprobs_after"
"""The token feature holding the recorder's logprobs after the update (the native field of that name)."""
REALIZED_ROW = "realized Δ log π"
"""The Rollout view's row of Δ per token, under the credit rows (on its own colour scale: log-prob units);
here, in a module without torch, so the figures' scales can name it."""


def after_checkpoints(store: Store, run: str) -> dict[int, str]:
    """step -> folder of the weights after the update that consumed the step, for the steps that name one."""
    rows = store.con.execute(
        "SELECT step, model_dir FROM step_after_checkpoints WHERE run_id = ? ORDER BY step",
        [store.run_id(run)],
    ).fetchall()
    return {int(step): str(folder) for step, folder in rows}


def set_after_checkpoints(store: Store, run: str, folders: dict[int, str]) -> None:
    """Attach `folders` (step -> folder) as the steps' after-update checkpoints, in one transaction."""
    run_id = store.run_id(run)
    with store.transaction() as con:
        for step, folder in sorted(folders.items()):
            con.execute(
                "DELETE FROM step_after_checkpoints WHERE run_id = ? AND step = ?", [run_id, int(step)]
            )
            con.execute(
                "INSERT INTO step_after_checkpoints (run_id, step, model_dir) VALUES (?, ?, ?)",
                [run_id, int(step), str(folder)],
            )


def recorded_after(store: Store, run: str, rollout_id: int | None = None) -> dict[int, np.ndarray]:
    """rollout id -> the recorder's logprobs after the update (float32), for the rollouts that have them (of
    one rollout: `rollout_id`)."""
    rows = store.con.execute(
        "SELECT rollout_id, vals FROM token_features WHERE run_id = ? AND name = ?"
        " AND (CAST(? AS BIGINT) IS NULL OR rollout_id = ?)",
        [store.run_id(run), RECORDED_AFTER, rollout_id, rollout_id],
    ).fetchall()
    return {int(r): np.asarray(v, np.float32) for r, v in rows}


def cached_after(store: Store, run: str, rollout_id: int | None = None) -> dict[int, tuple[str, np.ndarray]]:
    """rollout id -> (checkpoint folder, logprobs under it) cached by `creditlens landed` (of one rollout:
    `rollout_id`)."""
    rows = store.con.execute(
        "SELECT rollout_id, model_dir, logprobs FROM landed_logprobs WHERE run_id = ?"
        " AND (CAST(? AS BIGINT) IS NULL OR rollout_id = ?)",
        [store.run_id(run), rollout_id, rollout_id],
    ).fetchall()
    return {int(r): (str(d), np.asarray(v, np.float32)) for r, d, v in rows}


def cache_after(store: Store, run: str, model_dir: str, logprobs: dict[int, np.ndarray]) -> None:
    """Store the rollouts' logprobs under `model_dir` (replacing what they had), in one transaction."""
    if not logprobs:
        return
    run_id = store.run_id(run)
    ids = sorted(int(r) for r in logprobs)
    table = pa.table(
        {
            "run_id": pa.array([run_id] * len(ids), pa.int32()),
            "rollout_id": pa.array(ids, pa.int32()),
            "model_dir": pa.array([str(model_dir)] * len(ids), pa.string()),
            "logprobs": pa.array([np.asarray(logprobs[r], np.float32) for r in ids], pa.list_(pa.float32())),
        }
    )
    view = f"_landed_{threading.get_ident()}"
    with store.transaction() as con:
        con.execute(
            "DELETE FROM landed_logprobs WHERE run_id = ? AND list_contains(?, rollout_id)", [run_id, ids]
        )
        con.register(view, table)
        try:
            con.execute(
                "INSERT INTO landed_logprobs (run_id, rollout_id, model_dir, logprobs) "
                f"SELECT run_id, rollout_id, model_dir, logprobs FROM {view}"
            )
        finally:
            con.unregister(view)
