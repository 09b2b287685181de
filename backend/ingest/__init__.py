"""Importers: native JSONL/Parquet, verl rollout dumps, TRL completion logs, trainers' token dumps
(NeMo-RL, prime-rl, RL Logging Board: `token_dumps`) -> the store.

The package's face: `import_path` (a file or folder, its format detected or named), `import_records` (native
dicts), `import_batches` (native Arrow batches), the `ImportReport` each returns, `detect_format` and
`FORMATS`. The pipeline behind them (atomic, idempotent, memory-bounded imports) is `pipeline`; the formats'
registry is `formats`, each format's reader its own module; `follow` tails a live run's folder.
"""

from __future__ import annotations

from pathlib import Path

from backend.ingest import formats
from backend.ingest.pipeline import import_batches, import_path, import_records
from backend.ingest.report import ImportReport

FORMATS = formats.names()
"""Every import format (the registry's, `backend.ingest.formats`): the command line's and the Runs page's."""
__all__ = ["ImportReport", "import_path", "import_records", "import_batches", "detect_format", "FORMATS"]


def detect_format(path: Path) -> str:
    """The format of a file or folder, as the registry detects it (`formats.detect`)."""
    return formats.detect(path).name
