"""The Monte Carlo teacher's plan: which positions of which rollouts of a run to value
(`backend.models.teacher`), each rollout a `TeacherTask` that carries all a worker needs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from backend.core.errors import InputError
from backend.models.resample import suggest_entropy, suggest_steps
from backend.models.teacher_agent import plannable, turn_starts

JOB = "teacher"
SEED_STRIDE = 1_000_003
"""Rollout r samples with seed `seed + r * SEED_STRIDE` (+ prefix_index * M + sample_index inside)."""


# ---- plan -----------------------------------------------------------------------------------------------
def teacher_positions(
    spec: str,
    tokens: Sequence[str],
    entropies: Sequence[float] | None,
    length: int,
    turns: Sequence[dict] | None = None,
) -> list[int]:
    """Positions t (0 <= t < L) of one response to value: `steps` (position 0 and each line start),
    `entropy:K` (position 0 and the K highest-entropy tokens), `every:K` (0, K, 2K, ...) or `turns` (the
    start of every assistant turn); several joined by commas (`turns,every:8`) value their union."""
    if "," in spec:
        return sorted(
            {
                p
                for part in spec.split(",")
                if part
                for p in teacher_positions(part, tokens, entropies, length, turns)
            }
        )
    kind, _, arg = spec.partition(":")
    if kind == "turns" and not arg:
        out = turn_starts(turns, length)
    elif kind == "steps" and not arg:
        out = suggest_steps(list(tokens))
    elif kind in ("entropy", "every"):
        try:
            k = int(arg)
        except ValueError:
            raise InputError(f"--positions {spec!r}: expected {kind}:K with an integer K") from None
        if k < 1:
            raise InputError(f"--positions {spec!r}: K must be >= 1")
        if kind == "every":
            out = list(range(0, length, k))
        else:
            if entropies is None or not len(entropies):
                raise InputError(
                    "--positions entropy:K needs entropies; fill them with "
                    "`creditlens score --run RUN --model DIR` first"
                )
            out = [0, *suggest_entropy(list(entropies)[:length], k)]
    else:
        raise InputError(f"--positions {spec!r}: choose steps, turns, entropy:K or every:K (or several, a,b)")
    return sorted({int(p) for p in out if 0 <= int(p) < length})


@dataclass(frozen=True)
class TeacherTask:
    """One rollout to value: what a worker needs, and nothing from the store."""

    rollout_id: int
    prompt_ids: tuple[int, ...] | None
    prompt: str
    token_ids: tuple[int, ...]
    positions: tuple[int, ...]
    ground_truth: Any
    seed: int
    step: int = 0
    turns: tuple[tuple[str, int, int], ...] = ()
    """(role, start, end) of an agent response's turns (the tool loop continues from them)."""


def pick_rollouts(rollout_ids: Sequence[int], count: int | None) -> list[int]:
    """`count` rollouts spread evenly over the run (every rollout when None or >= the run's size)."""
    ids = sorted(int(r) for r in rollout_ids)
    if count is None or count >= len(ids):
        return ids
    if count < 1:
        raise InputError(f"--rollouts must be >= 1 or 'all', got {count}")
    picks = np.unique(np.linspace(0, len(ids) - 1, count).round().astype(np.int64))
    return [ids[i] for i in picks]


def plan_teacher(
    store,
    run: str,
    *,
    rollouts: int | None,
    positions: str,
    seed: int,
    verifier: str,
    tool_loop: bool = False,
) -> tuple[list[TeacherTask], int]:
    """Tasks for the chosen rollouts that have no teacher rows yet; also the number chosen in all. On an
    agent rollout, only the positions the sampler can value (`teacher_agent.plannable`; `tool_loop`: the
    run's environment continues the episodes)."""
    chosen = pick_rollouts(store.rollout_index(run)["rollout_id"].tolist(), rollouts)
    done = store.job_rollouts(run, JOB)
    tasks = []
    for rid in chosen:
        if rid in done:
            continue
        row = store.rollout(run, rid)
        token_ids = [int(t) for t in row["token_ids"]]
        truth = row.get("ground_truth")
        if truth is None:
            truth = (row.get("meta") or {}).get("ground_truth")
        if truth is None and ":" not in verifier:
            raise InputError(
                f"run {run!r} rollout {rid}: no ground truth (meta.ground_truth) for verifier {verifier!r}"
            )
        tokens = list(row["tokens"]) if row.get("tokens") is not None else [""] * len(token_ids)
        entropies = row.get("entropies")
        turns = row.get("turns") or []
        where = teacher_positions(
            positions, tokens, None if entropies is None else list(entropies), len(token_ids), turns
        )
        where = plannable(where, row, tool_loop)
        if not where:
            continue  # an empty response has nothing to value
        prompt_ids = row.get("prompt_ids")
        tasks.append(
            TeacherTask(
                rollout_id=rid,
                prompt_ids=None if prompt_ids is None else tuple(int(t) for t in prompt_ids),
                prompt=row.get("prompt") or "",
                token_ids=tuple(token_ids),
                positions=tuple(where),
                ground_truth=truth,
                seed=int(seed) + rid * SEED_STRIDE,
                step=int(row.get("step") or 0),
                turns=tuple((t["role"], int(t["start"]), int(t["end"])) for t in turns),
            )
        )
    return tasks, len(chosen)
