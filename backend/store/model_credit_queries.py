"""The cache of the model-based credit methods (table `model_credit`, migration 006).

`creditlens model-credit` writes one row per rollout and method; `Store.load_batch` turns complete
coverage of a batch into the extras `<method>_scores` / `<method>_mask` that the estimators read
(backend/store/model_credit_extras.py, which db.py imports).
Parameterized SQL only.
"""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa

from backend.core.batch_fields import MODEL_SCORED
from backend.store.db import Store

METHODS = MODEL_SCORED
"""Methods with a cache; each is also the name of the estimator that reads it."""


def save_model_credit(
    store: Store,
    run: str,
    method: str,
    scores: dict[int, np.ndarray],
    settings: dict,
    model: str | dict[int, str],
    engine: str,
    on_policy: bool | None | dict[int, bool | None] = None,
) -> int:
    """Replace the cached scores of `method` for these rollouts, all in one transaction (a failure leaves
    the store as it was); cached estimator outputs of the run are dropped. Returns the rows written.
    `model` and `on_policy` (whether the model sampled the rollout's step): one value, or one per rollout."""
    if method not in METHODS:
        raise ValueError(f"unknown model-credit method {method!r}; known: {', '.join(METHODS)}")
    run_id = store.run_id(run)
    ids = [int(r) for r in scores]
    n = len(ids)
    table = pa.table(
        {
            "run_id": pa.array([run_id] * n, pa.int32()),
            "rollout_id": pa.array(ids, pa.int32()),
            "method": pa.array([method] * n, pa.string()),
            "scores": pa.array([np.asarray(s, np.float32) for s in scores.values()], pa.list_(pa.float32())),
            "settings": pa.array([json.dumps(settings, sort_keys=True)] * n, pa.string()),
            "model": pa.array([model[r] if isinstance(model, dict) else model for r in ids], pa.string()),
            "engine": pa.array([engine] * n, pa.string()),
            "on_policy": pa.array(
                [on_policy.get(r) if isinstance(on_policy, dict) else on_policy for r in ids], pa.bool_()
            ),
        }
    )
    with store.transaction() as con:
        con.execute(
            "DELETE FROM model_credit WHERE run_id = ? AND method = ? AND list_contains(?, rollout_id)",
            [run_id, method, ids],
        )
        store.insert_arrow("model_credit", table)
        store._drop_cached_estimates(run_id)  # the model-based estimators read these scores
    return n


def model_credit_rows(store: Store, run: str, rollout_id: int | None = None) -> pd.DataFrame:
    """Cached rows: rollout_id, method, scores, settings, model, engine, created, on_policy (by rollout,
    method)."""
    sql = (
        "SELECT rollout_id, method, scores, settings, model, engine, created, on_policy FROM model_credit "
        "WHERE run_id = ?"
    )
    params: list = [store.run_id(run)]
    if rollout_id is not None:
        sql += " AND rollout_id = ?"
        params.append(int(rollout_id))
    return store.con.execute(sql + " ORDER BY rollout_id, method", params).df()


def covered_rollouts(store: Store, run: str, method: str) -> set[int]:
    rows = store.con.execute(
        "SELECT rollout_id FROM model_credit WHERE run_id = ? AND method = ?", [store.run_id(run), method]
    ).fetchall()
    return {int(r[0]) for r in rows}


def rollout_tokens(store: Store, run: str, rollout_ids: list[int]) -> pd.DataFrame:
    """rollout_id, prompt, prompt_ids, token_ids, tokens of the given rollouts (by rollout id)."""
    return store.con.execute(
        "SELECT rollout_id, prompt, prompt_ids, token_ids, tokens FROM rollouts "
        "WHERE run_id = ? AND list_contains(?, rollout_id) ORDER BY rollout_id",
        [store.run_id(run), [int(r) for r in rollout_ids]],
    ).df()
