"""The agent episode driver: the policy writes a turn, the environment answers, the policy goes on.

One loop for every agent episode Credit Lens samples: the bundled agent run (`backend.demo.agent`), and
suffix resampling and the Monte Carlo teacher on an agent run (`backend.models.resample`,
`backend.models.teacher`), which continue an episode from a position of one of its assistant turns the way
the run's loop did. Per round, every live episode's next assistant turn is sampled in one batched engine
call; a turn ends at the environment's `turn_end` (kept), or without it (the end token or the turn's budget:
the episode ends); the environment answers the turn's whole text (`Environment.respond`), and its answer
goes into the response as a tool turn (`loss_mask` 0), or the turn called no tool and the episode ends; so
does the turn limit, and a context with no room for the tool's answer and one more turn.

Seeds: assistant turn k of an episode draws with `episode.seed + k * turn_stride` (the engine's per-sample
seed), so an episode's draws do not depend on which others share its batch.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from backend.core.errors import InputError
from backend.models.engine import Cancel, Engine, Progress
from backend.models.environments import Environment


@dataclass(eq=False)  # identity: two episodes of a group start equal
class Episode:
    """One episode being sampled: its context, its response tokens and their turns."""

    prompt_ids: list[int]
    seed: int
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)
    """{role, start, end} spans of the response, end exclusive."""
    lines: list[str] = field(default_factory=list)
    """The text of each assistant turn finished so far (the environment answered each)."""
    sampled: dict[int, float] = field(default_factory=dict)
    """Position -> the logprob the policy sampled the token with (the tokens this driver drew)."""
    turn: int = 0
    """Assistant turns begun (the turn limit counts them)."""
    open_start: int | None = None
    """Where an unfinished assistant turn began (an episode continued from inside a turn); None: none."""
    done: bool = False
    tag: object = None
    """The caller's own label (a problem, a (position, sample) pair)."""

    def add(self, role: str, ids: list[int]) -> None:
        start = len(self.token_ids)
        self.token_ids += ids
        self.loss_mask += [1 if role == "assistant" else 0] * len(ids)
        if role == "assistant" and self.open_start is not None and self.turns:
            self.turns[-1]["end"] = start + len(ids)  # the open turn goes on
        else:
            self.turns.append({"role": role, "start": start, "end": start + len(ids)})


def _turn_cut(engine: Engine, partial: list[int], ids: list[int], turn_end: str) -> int | None:
    """How many of `ids` the turn keeps when `turn_end` ends it (the first token whose text completes it),
    or None when it does not end in `ids`."""
    before = engine.decode(partial).count(turn_end)
    for k in range(len(ids)):
        if engine.decode(partial + ids[: k + 1]).count(turn_end) > before:
            return k + 1
    return None


def run_episodes(
    engine: Engine,
    episodes: Sequence[Episode],
    environment: Environment,
    *,
    turn_stride: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    progress: Progress | None = None,
    cancel: Cancel | None = None,
) -> list[Episode]:
    """Sample every episode to its end (module docstring); returns them (those a cancel left unfinished have
    `done` False). progress(done, total) after each round; cancel() is checked before each."""
    env = environment
    while True:
        live = [e for e in episodes if not e.done]
        if not live or (cancel is not None and cancel()):
            break
        budgets = [
            env.turn_tokens - (len(e.token_ids) - e.open_start if e.open_start is not None else 0)
            for e in live
        ]
        samples = engine.generate(
            [e.prompt_ids + e.token_ids for e in live],
            n=1,
            max_new_tokens=max(1, max(budgets)),
            temperature=temperature,
            top_p=top_p,
            prefix_seeds=[e.seed + e.turn * turn_stride for e in live],
        )
        for episode, sample, budget in zip(live, samples, budgets, strict=True):
            _take_turn(engine, env, episode, sample, max(0, budget))
        if progress is not None:
            progress(sum(e.done for e in episodes), len(episodes))
    return list(episodes)


def _take_turn(engine: Engine, env: Environment, episode: Episode, sample, budget: int) -> None:
    """One assistant turn of `episode` from its sample, then the environment's answer or the episode's end."""
    partial = episode.token_ids[episode.open_start :] if episode.open_start is not None else []
    ids = list(sample.token_ids[:budget])
    cut = _turn_cut(engine, partial, ids, env.turn_end)
    if cut is not None:
        ids = ids[:cut]
    line = engine.decode(partial + ids)
    episode.sampled.update(
        {len(episode.token_ids) + k: lp for k, lp in enumerate(sample.logprobs[: len(ids)])}
    )
    episode.add("assistant", ids)
    episode.open_start = None
    episode.lines.append(line)
    last = episode.turn == env.max_turns - 1
    episode.turn += 1
    limit = getattr(engine, "max_positions", None) or 10**9
    room = limit - len(episode.prompt_ids) - len(episode.token_ids)
    answer = None
    if cut is not None and not last and room - env.turn_tokens - env.tool_tokens >= 0:
        answer = env.respond(line)
    if answer is None:
        episode.done = True
    else:
        episode.add("tool", engine.encode(answer))
        # a tool's answer longer than the room kept for it leaves no position for the policy's next token
        episode.done = len(episode.prompt_ids) + len(episode.token_ids) >= limit - 1


def continued(
    prompt_ids: Sequence[int],
    token_ids: Sequence[int],
    turns: Sequence[dict],
    pos: int,
    seed: int,
    decode: Callable[[list[int]], str],
    tag: object = None,
) -> Episode:
    """The episode of a stored response kept up to position `pos` (y_<pos), ready to be continued: its turns
    cut at `pos`, the turn `pos` is inside left open, the assistant turns before it counted and their text
    kept (the environment answered them). `pos` must be on an assistant turn's tokens, at its start, or at
    the response's end after an assistant turn (`tool_position_problem` says why not otherwise)."""
    token_ids = list(token_ids)[:pos]
    episode = Episode(list(prompt_ids), seed, tag=tag)
    for turn in sorted(turns, key=lambda t: int(t["start"])):
        role, start, end = turn["role"], int(turn["start"]), int(turn["end"])
        if start >= pos:
            break
        ids = token_ids[start : min(end, pos)]
        episode.add(role, ids)
        if role == "assistant":
            if end > pos or end == pos == len(token_ids):
                episode.open_start = start  # continued from inside it (or from its end: the last turn)
            else:
                episode.turn += 1
                episode.lines.append(decode(ids))
    if len(episode.token_ids) != len(token_ids):
        raise InputError(f"position {pos}: the response's turns do not cover its first {pos} tokens")
    return episode


def tool_position_problem(pos: int, turns: Sequence[dict], length: int) -> str | None:
    """Why the tool loop cannot continue a response from position `pos` (None: it can): a position on a
    tool's or the environment's tokens is not the policy's state (the next token is the tool's answer)."""
    for turn in turns:
        role, start, end = turn["role"], int(turn["start"]), int(turn["end"])
        if role != "assistant" and start <= pos < end:
            return (
                f"position {pos} is inside the {role}'s output [{start}, {end}): not the policy's text (not "
                "trained), so no policy suffix from it stands for this rollout; resample from an assistant "
                f"turn's tokens, e.g. {end} (where the policy reads the {role}'s answer)"
            )
    if 0 < length == pos and turns and max(turns, key=lambda t: int(t["end"]))["role"] != "assistant":
        return f"position {pos} is the end of the response, after a non-assistant turn"
    return None
