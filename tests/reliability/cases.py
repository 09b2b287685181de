"""The reliability suite's case tally: cases tried, by kind, printed after the run ("reliability cases
tried") and written to $CREDITLENS_RELIABILITY_COUNTS if set. Under pytest-xdist each worker counts its own
cases and hands them to the controller at the end (tests/conftest.py adds them up)."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

TALLY: Counter = Counter()
WORKER_OUTPUT_KEY = "reliability_tally"


def tally(kind: str, outcome: str) -> None:
    TALLY[f"{kind}: {outcome}"] += 1


def write_summary(terminalreporter, counts: Counter) -> None:
    if not counts:
        return
    terminalreporter.write_sep("-", "reliability cases tried")
    for key in sorted(counts):
        terminalreporter.write_line(f"{counts[key]:>6}  {key}")
    terminalreporter.write_line(f"{sum(counts.values()):>6}  total")
    out = os.environ.get("CREDITLENS_RELIABILITY_COUNTS")
    if out:
        Path(out).write_text(json.dumps(dict(counts), indent=1, sort_keys=True))
