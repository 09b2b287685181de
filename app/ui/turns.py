"""An agent run's turns on the Rollout view: the label that opens each turn in the credit text, and the
caption that says what the greyed tokens are. Turns come from the rollout's record (`turns`: [{role, start,
end}], end exclusive); a turn is "not trained" when the loss mask drops all of its tokens."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

ROLES = ("assistant", "tool", "user", "environment", "system")


def turn_labels(
    turns: Sequence[dict] | None, untrained: np.ndarray | None, offset: int = 0, length: int | None = None
) -> dict[int, tuple[str, str]]:
    """Position (within a window of `length` tokens starting at `offset`) -> (role, label) for the token that
    opens a turn, e.g. ("assistant", "assistant · turn 2") or ("tool", "tool · not trained"). A window that
    starts inside a turn gets that turn's label, marked "(continued)", on its first token."""
    labels: dict[int, tuple[str, str]] = {}
    end_of_window = offset + (length if length is not None else 1 << 30)
    assistant_turn = 0
    for turn in turns or []:
        role = turn["role"] if turn["role"] in ROLES else "other"
        start, end = int(turn["start"]), int(turn["end"])
        if role == "assistant":
            assistant_turn += 1
        trained = untrained is None or not bool(np.all(untrained[start:end]))
        label = f"{role} · turn {assistant_turn}" if role == "assistant" else role
        label += "" if trained else " · not trained"
        if offset <= start < end_of_window:
            labels[start - offset] = (role, label)
        elif start < offset < end:
            labels[0] = (role, label + " (continued)")
    return labels


def turns_caption(turns: Sequence[dict] | None) -> str | None:
    """A line on the rollout's turns (None without turns): how many of each role, and what grey means."""
    if not turns:
        return None
    counts: dict[str, int] = {}
    for turn in turns:
        counts[turn["role"]] = counts.get(turn["role"], 0) + 1
    parts = ", ".join(f"{n} {role}" for role, n in counts.items())
    return (
        f"{len(turns)} turns ({parts}). Grey tokens are not trained (loss mask 0: a tool's or the "
        "environment's text the policy reads): no estimator credits them, and no mean, weight or position "
        "counts them."
    )
