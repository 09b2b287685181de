"""The model-credit cache as batch extras (`Store.load_batch`): kept apart from model_credit_queries.py,
which imports `Store`, so that db.py can import this without an import circle. Numpy arrays: the
caller makes the tensors (the store imports torch only when it builds a batch)."""

from __future__ import annotations

import duckdb
import numpy as np

from backend.core.batch_fields import MODEL_SCORED, model_score_needs


def model_credit_extras(
    con: duckdb.DuckDBPyConnection,
    run_id: int,
    ids: list[int],
    T: int,
    methods: tuple[str, ...] | list[str] = MODEL_SCORED,
) -> dict[str, np.ndarray]:
    """For each of `methods` whose cache covers every rollout of `ids` (in this order): scores (B, T) with 0
    where unscored, and mask (B, T) 1.0 on scored tokens. A method covering only some rollouts gives
    nothing, so its estimator is unavailable on the batch (with the command that fills it)."""
    if not ids:
        return {}
    rows = con.execute(
        "SELECT rollout_id, method, scores FROM model_credit "
        "WHERE run_id = ? AND list_contains(?, rollout_id)",
        [run_id, ids],
    ).fetchall()
    row_of = {rid: i for i, rid in enumerate(ids)}
    out: dict[str, np.ndarray] = {}
    for method in methods:
        mine = [(int(r), s) for r, m, s in rows if m == method]
        if len(mine) < len(ids):
            continue
        scores = np.zeros((len(ids), T), dtype=np.float32)
        mask = np.zeros((len(ids), T), dtype=np.float32)
        for rid, vals in mine:
            vals = np.asarray(vals, dtype=np.float32)[:T]
            ok = np.isfinite(vals)
            scores[row_of[rid], : len(vals)] = np.where(ok, vals, 0.0)
            mask[row_of[rid], : len(vals)] = ok
        name, mask_name = model_score_needs(method)
        out[name], out[mask_name] = scores, mask
    return out
