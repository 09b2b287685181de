"""backend/estimators/catalog.json (what `creditlens estimators` prints without importing the estimators)
is the registry's list, field for field."""

from __future__ import annotations

import json

from backend.cli import estimator_catalog


def test_the_catalog_is_what_the_registry_says():
    # Compared as JSON text, so that 1 and 1.0 (printed differently by `creditlens estimators`) differ.
    written = {s["name"]: json.dumps(s) for s in estimator_catalog.schemas()}
    live = {s["name"]: json.dumps(s) for s in estimator_catalog.registry_schemas()}
    stale = sorted(n for n in written.keys() | live.keys() if written.get(n) != live.get(n))
    assert not stale and list(written) == list(live), (
        f"backend/estimators/catalog.json differs from the registry ({', '.join(stale) or 'the order'}): "
        "rewrite it with `python -m backend.cli.estimator_catalog`"
    )
