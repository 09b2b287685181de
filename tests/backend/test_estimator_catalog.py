"""backend/estimators/catalog.json (what `creditlens estimators` prints without importing the estimators)
is the registry's list, field for field."""

from __future__ import annotations

import json

from backend import estimator_catalog


def test_the_catalog_is_what_the_registry_says():
    written = {s["name"]: s for s in estimator_catalog.schemas()}
    # Through JSON as the file is: the registry's schemas hold only JSON types (lists, numbers, text).
    live = {s["name"]: s for s in json.loads(json.dumps(estimator_catalog.registry_schemas()))}
    stale = sorted(n for n in written.keys() | live.keys() if written.get(n) != live.get(n))
    assert not stale and list(written) == list(live), (
        f"backend/estimators/catalog.json differs from the registry ({', '.join(stale) or 'the order'}): "
        "rewrite it with `python -m backend.estimator_catalog`")
