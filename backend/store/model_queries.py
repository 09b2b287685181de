"""Queries the model commands need beyond `Store`'s methods (scoring: which rollouts lack arrays).

Kept in its own module so the models area adds SQL without touching `db.py`; parameterized only.
"""

from __future__ import annotations

import pandas as pd

from backend.store.db import Store


def rollouts_to_score(store: Store, run: str, only_missing: bool = True) -> pd.DataFrame:
    """Rollouts of `run` whose logprobs or entropies are missing (all rollouts if not `only_missing`).

    Columns: rollout_id, prompt, prompt_ids, token_ids, has_logprobs, has_entropies; ordered by rollout id.
    """
    run_id = store.run_id(run)
    missing = " AND (logprobs IS NULL OR entropies IS NULL)" if only_missing else ""
    return store.con.execute(
        "SELECT rollout_id, prompt, prompt_ids, token_ids, logprobs IS NOT NULL AS has_logprobs, "
        "entropies IS NOT NULL AS has_entropies FROM rollouts WHERE run_id = ?"
        + missing
        + " ORDER BY rollout_id",
        [run_id],
    ).df()
