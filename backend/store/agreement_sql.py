"""The Explorer's agreement column: per rollout, the Spearman correlation of two cached estimator outputs
over its tokens (`credit_agreement`, migration 004), computed in DuckDB."""

from __future__ import annotations

from backend.store.db import Store
from backend.store.explorer_queries import CreditKey


def fill_agreement(store: Store, run_id: int, a: CreditKey, b: CreditKey) -> None:
    """Per rollout, Spearman of two cached estimator outputs over the rollout's tokens (Pearson of average
    ranks, as `backend.evaluation.metrics.spearman`; NULL where either is constant). Call inside a
    transaction."""
    store.con.execute(
        "DELETE FROM credit_agreement WHERE run_id = ? AND estimator_a = ? AND hash_a = ? "
        "AND estimator_b = ? AND hash_b = ? AND channel = ?",
        [run_id, a.estimator, a.config_hash, b.estimator, b.config_hash, a.channel],
    )
    store.con.execute(
        """
        INSERT INTO credit_agreement
        WITH pairs AS (
            SELECT ea.rollout_id, unnest(ea.advantages) AS x, unnest(eb.advantages) AS y
            FROM estimates ea JOIN estimates eb
              ON eb.run_id = ea.run_id AND eb.rollout_id = ea.rollout_id
             AND eb.estimator = ? AND eb.config_hash = ? AND eb.channel = ?
            WHERE ea.run_id = ? AND ea.estimator = ? AND ea.config_hash = ? AND ea.channel = ?
        ), ranked AS (
            SELECT rollout_id,
                   rank() OVER (PARTITION BY rollout_id ORDER BY x)
                     + (count(*) OVER (PARTITION BY rollout_id, x) - 1) / 2.0 AS rx,
                   rank() OVER (PARTITION BY rollout_id ORDER BY y)
                     + (count(*) OVER (PARTITION BY rollout_id, y) - 1) / 2.0 AS ry
            FROM pairs
        )
        SELECT ?, ?, ?, ?, ?, ?, rollout_id,
               CASE WHEN var_pop(rx) > 0 AND var_pop(ry) > 0 THEN corr(rx, ry) END
        FROM ranked GROUP BY rollout_id
        """,
        [
            b.estimator,
            b.config_hash,
            b.channel,
            run_id,
            a.estimator,
            a.config_hash,
            a.channel,
            run_id,
            a.estimator,
            a.config_hash,
            b.estimator,
            b.config_hash,
            a.channel,
        ],
    )


def agreement_rows(store: Store, run_id: int, a: CreditKey, b: CreditKey) -> int:
    return int(
        store.con.execute(
            "SELECT count(*) FROM credit_agreement WHERE run_id = ? AND estimator_a = ? AND hash_a = ? "
            "AND estimator_b = ? AND hash_b = ? AND channel = ?",
            [run_id, a.estimator, a.config_hash, b.estimator, b.config_hash, a.channel],
        ).fetchall()[0][0]
    )
