"""Which checkpoint sampled each step of a run (table `step_checkpoints`, migration 010).

Parameterized SQL only. Folders arrive here absolute (`backend.store.checkpoints` resolves them).
"""

from __future__ import annotations

import pandas as pd

from backend.store.db import Store


def step_checkpoints(store: Store, run: str) -> dict[int, str]:
    """step -> model folder of every step of `run` whose sampling checkpoint is known."""
    rows = store.con.execute(
        "SELECT step, model_dir FROM step_checkpoints WHERE run_id = ? ORDER BY step", [store.run_id(run)]
    ).fetchall()
    return {int(step): str(folder) for step, folder in rows}


def set_step_checkpoints(store: Store, run: str, folders: dict[int, str]) -> None:
    """Attach `folders` (step -> folder) to `run`, replacing what those steps had, in one transaction."""
    run_id = store.run_id(run)
    with store.transaction() as con:
        for step, folder in sorted(folders.items()):
            con.execute("DELETE FROM step_checkpoints WHERE run_id = ? AND step = ?", [run_id, int(step)])
            con.execute(
                "INSERT INTO step_checkpoints (run_id, step, model_dir) VALUES (?, ?, ?)",
                [run_id, int(step), str(folder)],
            )


def run_steps(store: Store, run: str) -> dict[int, int]:
    """step -> number of rollouts, for every step of `run`."""
    rows = store.con.execute(
        "SELECT step, count(*) FROM rollouts WHERE run_id = ? GROUP BY step ORDER BY step",
        [store.run_id(run)],
    ).fetchall()
    return {int(step): int(n) for step, n in rows}


def rollout_steps(store: Store, run: str, rollout_ids) -> dict[int, int]:
    """rollout id -> its step, for the given rollouts of `run`."""
    ids = [int(r) for r in rollout_ids]
    if not ids:
        return {}
    rows = store.con.execute(
        "SELECT rollout_id, step FROM rollouts WHERE run_id = ? AND list_contains(?, rollout_id)",
        [store.run_id(run), ids],
    ).fetchall()
    return {int(r): int(s) for r, s in rows}


def empty_prefix_values(store: Store, run: str) -> pd.DataFrame:
    """Per valued rollout of `run`: rollout_id, step, value (V̂ at position 0, every stored suffix pooled),
    n, on_policy (True when every suffix there came from the step's checkpoint, False when any came from
    another model, None when any is of unknown origin)."""
    return store.con.execute(
        "SELECT s.rollout_id, o.step, avg(s.reward) AS value, count(*) AS n, "
        "CASE WHEN bool_or(NOT s.on_policy) THEN false WHEN count(s.on_policy) = count(*) THEN true END "
        "AS on_policy "
        "FROM resample_samples s JOIN rollouts o ON o.run_id = s.run_id AND o.rollout_id = s.rollout_id "
        "WHERE s.run_id = ? AND s.pos = 0 GROUP BY s.rollout_id, o.step ORDER BY s.rollout_id",
        [store.run_id(run)],
    ).df()
