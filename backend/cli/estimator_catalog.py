"""Every registered estimator's schema (`registry.config_schema` of each of `registry.names()`), kept in
`backend/estimators/catalog.json` so that `creditlens estimators` lists them without importing torch and
every estimator (2-3 s). The registry stays the owner: the file is written from it (`python -m
backend.cli.estimator_catalog`) and tests/backend/test_estimator_catalog.py fails when the two differ.
"""

from __future__ import annotations

import json
from pathlib import Path

CATALOG = Path(__file__).resolve().parents[1] / "estimators" / "catalog.json"


def schemas() -> list[dict]:
    """The schemas in the registry's order, as `registry.config_schema` gives them (read from the file)."""
    return json.loads(CATALOG.read_text(encoding="utf-8"))


def registry_schemas() -> list[dict]:
    """The same list from the registry itself (imports every estimator)."""
    from backend.estimators import registry  # noqa: PLC0415 - heavy (torch, every estimator); writing only

    return [registry.config_schema(name) for name in registry.names()]


def write() -> Path:
    """Rewrite the file from the registry; returns its path."""
    CATALOG.write_text(json.dumps(registry_schemas(), indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return CATALOG


if __name__ == "__main__":
    print(f"wrote {write()} ({len(schemas())} estimators)")
