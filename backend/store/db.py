"""The DuckDB store: one file, numbered migrations, Arrow in and out. All SQL of the project lives in
this package. `Store` is the one object callers use, composed by job:

- `connection.py`: the file, migrations, transactions, Arrow inserts, the list of run tables;
- `runs.py`: runs, staged imports and rollout rows;
- `batches.py`: rollouts as padded tensor batches for the estimators;
- `results.py`: the estimator cache and resampling results;
- `model_queries.py` and `explorer_queries.py`: the model commands' and the Explorer's queries.
"""

from __future__ import annotations

from backend.store.batches import Batches, pad_list_array
from backend.store.connection import RUN_TABLES, default_db_path
from backend.store.results import Results

__all__ = ["RUN_TABLES", "Store", "default_db_path", "pad_list_array"]


class Store(Batches, Results):
    """A Credit Lens run store on a DuckDB file (created and migrated on first use)."""
