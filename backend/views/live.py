"""A run as it grows: its latest step and when it last received rollouts, for the app's Live line
("step 11 · updated 4 s ago"), `creditlens watch` and `creditlens runs --json` (`last_step`, `updated`,
`imports`: the same row of `Runs.list_runs`)."""

from __future__ import annotations

import time
from dataclasses import dataclass

from backend.core.errors import InputError
from backend.store import StoreHandle

RECENT_SECONDS = 600.0
"""A run that received new rollouts this recently (after its first import) is followed live by default."""


@dataclass(frozen=True)
class Progress:
    run: str
    last_step: int | None
    steps: int
    rollouts: int
    updated: float | None  # seconds since the epoch of its latest import; None: no import wrote it
    imports: int

    @property
    def fingerprint(self) -> tuple:
        """Changes when the run receives rollouts (what a page drawn on it would show differently)."""
        return (self.rollouts, self.steps, self.last_step, self.imports)

    def age(self, now: float | None = None) -> float | None:
        """Seconds since the run last received rollouts."""
        if self.updated is None:
            return None
        return max(0.0, (time.time() if now is None else now) - self.updated)

    def growing(self, now: float | None = None, window: float = RECENT_SECONDS) -> bool:
        """Whether the run received a step after its first import within the last `window` seconds: a run
        being trained and followed, not one imported once (the bundled demo, an import of a finished run)."""
        age = self.age(now)
        return self.imports > 1 and age is not None and age <= window

    def line(self, now: float | None = None) -> str:
        """'step 11 · updated 4 s ago'."""
        step = "no steps yet" if self.last_step is None else f"step {self.last_step}"
        age = self.age(now)
        return step if age is None else f"{step} · updated {ago(age)}"


def ago(seconds: float) -> str:
    """'4 s ago', '3 min ago', '2 h ago', '5 d ago' (whole units, rounded down)."""
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def progress(handle: StoreHandle, run: str) -> Progress:
    """The run's progress, from its row of `creditlens runs --json`."""
    with handle.read() as store:
        rows = store.list_runs()
    return from_row(next((r for r in rows if r["name"] == run), None), run)


def from_row(row: dict | None, run: str) -> Progress:
    """A `Runs.list_runs` row as a `Progress` (`run`: named in the error when the store has no such run)."""
    if row is None:
        raise InputError(f"no run named {run!r} in the store")
    return Progress(
        run=row["name"],
        last_step=row["last_step"],
        steps=row["steps"],
        rollouts=row["rollouts"],
        updated=row["updated"],
        imports=row["imports"],
    )
