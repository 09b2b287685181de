"""The Monte Carlo teacher on an agent run: V̂ at the start of every assistant turn, each suffix the rest of
the episode through the run's tool loop (`backend.models.agent_resample`, `backend.models.tool_loop`).

`creditlens teacher --positions turns` values the state before each assistant turn (position 0, the first
turn's start, is V̂(∅): the calibration check compares its mean per step with the step's success rate);
other position specs add chosen positions. Positions the sampler cannot value are dropped from the plan:
those inside a tool's output, and without an environment every position before a tool's answer.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from backend.models.agent_resample import TURN_SEED_STRIDE, episode_sample, episodes_at, playable_positions
from backend.models.environments import get_environment
from backend.models.resample import ResampleResult, task_results
from backend.models.tool_loop import run_episodes
from backend.rewards import get_verifier


def turn_starts(turns: Sequence[dict] | None, length: int) -> list[int]:
    """Where each assistant turn starts (position 0 for a response without turns)."""
    if not turns:
        return [0] if length > 0 else []
    return sorted({int(t["start"]) for t in turns if t["role"] == "assistant" and int(t["start"]) < length})


def plannable(positions: Sequence[int], row: dict, tool_loop: bool) -> list[int]:
    """The planned positions of a stored rollout (`Store.rollout`) the sampler can value."""
    if not row.get("turns") and row.get("loss_mask") is None:
        return list(positions)
    return playable_positions(positions, row, tool_loop)


def value_episodes(engine, tasks: Sequence, settings, cancel=None) -> list[ResampleResult]:
    """`backend.models.teacher.value_rollouts` through the tool loop of `settings.environment`: every
    position of every task, M episodes each, in one driver run (its rounds batched across tasks).

    Sample j at the task's position k has seed `task.seed + k * M + j`, as without a tool loop; its turn t
    draws with that seed + t * TURN_SEED_STRIDE, so grouping tasks changes no suffix.
    """
    environment = get_environment(settings.environment)
    M = settings.samples
    episodes = []
    for i, task in enumerate(tasks):
        prompt = list(task.prompt_ids) if task.prompt_ids is not None else engine.encode(task.prompt)
        turns = [{"role": r, "start": s, "end": e} for r, s, e in task.turns]
        firsts = [task.seed + k * M for k in range(len(task.positions))]
        episodes += episodes_at(engine, prompt, task.token_ids, turns, task.positions, M, firsts, owner=i)
    start = time.perf_counter()
    run_episodes(
        engine,
        episodes,
        environment,
        turn_stride=TURN_SEED_STRIDE,
        temperature=settings.temperature,
        top_p=settings.top_p,
        cancel=cancel,
    )
    verify = get_verifier(settings.verifier)
    per_task = [[] for _ in tasks]
    for e in episodes:
        if e.done:
            task = tasks[e.tag[0]]
            per_task[e.tag[0]].append(episode_sample(engine, e, verify, settings.verifier, task.ground_truth))
    return task_results(tasks, per_task, start, engine, M)
