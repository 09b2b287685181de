"""A store made ready for the app: created or migrated, with the bundled runs it lacks (`creditlens app` and
`creditlens watch` before they serve it)."""

from __future__ import annotations

from pathlib import Path

from backend.store import open_store


def prepare_store(db: Path) -> list[str]:
    """Create/migrate the store and import the bundled sample runs it lacks; returns their names."""
    # The bundled teacher's reader imports torch: `creditlens app --help` and `creditlens watch --help` start
    # in about 0.5 s instead of 3 s.
    from backend.demo.bundled import import_bundled  # noqa: PLC0415 - heavy (torch)

    with open_store(db, create=True) as store:
        return import_bundled(store, quiet=True)
